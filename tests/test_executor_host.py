"""The executor's optimizer step and the host copies around its data-parallel all-reduce,
priced from a profile's rows per block (sim3d/costs/executor_host.py): a rank pays the blocks
of its stages, hand-counted here from a profile of round numbers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import sim3d
from sim3d.costs.compute import block_shape
from sim3d.costs.profile import COLUMNS
from sim3d.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "scenarios" / "tiny.yaml"
STEP = {"block": 1e-3, "embedding_block": 2e-3, "head_block": 4e-3}
COPIES = {"block": 1e-4, "embedding_block": 2e-4, "head_block": 4e-4}


@pytest.fixture
def profile(tmp_path) -> Path:
    shape = block_shape(load_scenario(TINY))
    rows = [dict(op=f"{block}.{what}", kind="optimizer", shape=shape, numel=1000, dtype="fp32", device="cpu",
                 seconds=seconds) for what, table in (("step", STEP), ("grad_copies", COPIES))
            for block, seconds in table.items()]
    path = tmp_path / "host.csv"
    pd.DataFrame(rows).reindex(columns=COLUMNS).to_csv(path, index=False)
    return path


def durations(result, kind: str) -> dict[int, float]:
    t = result.trace[result.trace["kind"] == kind]
    return (t.end_s - t.start_s).groupby(t["rank"]).sum().to_dict()


def test_each_rank_steps_the_blocks_of_its_stages(profile):
    """pp 2 over tiny's 4 layers: rank 0 holds 2 layers and the embedding, rank 1 2 layers and
    the head."""
    result = sim3d.simulate(TINY, sets=["parallel.pp=2", "cluster.gpus_per_node=2", f"costs.profile={profile}"])
    steps = durations(result, "OPT_STEP")
    tied = 1e-5  # the row also holds the tied embedding's gradient all-reduce: microseconds on NVLink
    assert steps[0] == pytest.approx(2 * STEP["block"] + STEP["embedding_block"], abs=tied)
    assert steps[1] == pytest.approx(2 * STEP["block"] + STEP["head_block"], abs=tied)
    assert durations(result, "DP_REDUCE") == {} or max(durations(result, "DP_REDUCE").values()) == 0
    assert any("executor step" in what for what, _ in result.explain())


def test_a_data_parallel_reduce_pays_the_copies_and_a_sharded_optimizer_the_byte_model(profile):
    sets = ["parallel.dp=2", "cluster.gpus_per_node=2"]
    measured = sim3d.simulate(TINY, sets=[*sets, f"costs.profile={profile}"])
    plain = sim3d.simulate(TINY, sets=sets)
    whole = 4 * COPIES["block"] + COPIES["embedding_block"] + COPIES["head_block"]
    # one pipeline simulated (its replica is the same): rank 0
    assert durations(measured, "DP_REDUCE")[0] - durations(plain, "DP_REDUCE")[0] == pytest.approx(whole)
    assert durations(measured, "OPT_STEP")[0] == pytest.approx(
        4 * STEP["block"] + STEP["embedding_block"] + STEP["head_block"])
    sharded = sim3d.simulate(TINY, sets=[*sets, "parallel.zero=1", f"costs.profile={profile}"])
    assert durations(sharded, "OPT_STEP")[0] == pytest.approx(durations(
        sim3d.simulate(TINY, sets=[*sets, "parallel.zero=1"]), "OPT_STEP")[0])


def test_a_profile_without_a_block_leaves_the_step_to_the_byte_model(profile, tmp_path):
    table = pd.read_csv(profile)
    partial = tmp_path / "partial.csv"
    table[table.op != "head_block.step"].to_csv(partial, index=False)
    sets = ["parallel.pp=2", "cluster.gpus_per_node=2"]
    steps = durations(sim3d.simulate(TINY, sets=[*sets, f"costs.profile={partial}"]), "OPT_STEP")
    assert steps[0] == pytest.approx(2 * STEP["block"] + STEP["embedding_block"], abs=1e-5)
    assert steps[1] == pytest.approx(durations(sim3d.simulate(TINY, sets=sets), "OPT_STEP")[1])
