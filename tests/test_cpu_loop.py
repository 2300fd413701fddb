"""The loop a machine without a GPU can close: calibrate this CPU, execute a layout, simulate
the scenario it ran with that profile, compare. How close the two steps are is measured by
benchmarks/cpu_loop.py, never asserted here: CPU timings are the machine's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sim3d.costs.profile import COLUMNS, Profile, profile_warnings
from sim3d.costs.profile_cpu import slowdown
from sim3d.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny.yaml"


def sim3d(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim3d.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> Path:
    """A small CPU profile of tiny.yaml (the harness `sim3d calibrate` runs, on a reduced grid)
    and an executed pp 2 run of it: the folder holding profile.csv and exec/."""
    pytest.importorskip("torch")
    from sim3d_calibrate import run_calibration
    from sim3d_calibrate.shapes import KernelPlan
    folder = tmp_path_factory.mktemp("cpu-loop")
    run_calibration("cpu", quick=True, scenario_path=str(TINY), out=str(folder / "profile.csv"),
                    plan=KernelPlan(), sizes=[1024, 16384], group_sizes=[2], collective_ops=("all_reduce", "send_recv"),
                    processes=(1, 2))
    done = sim3d("execute", TINY, "--set", "parallel.pp=2", "--steps", "3", "--out", "exec", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


def test_the_loop_runs_end_to_end_and_compare_prints_the_step_error(loop):
    assert (loop / "exec" / "scenario.yaml").is_file()
    done = sim3d("run", "exec/scenario.yaml", "--set", "costs.profile=profile.csv", "--out", "sim", "--no-plots",
                 cwd=loop)
    assert done.returncode == 0, done.stderr
    compared = sim3d("compare", "sim", "exec", cwd=loop)
    assert compared.returncode == 0, compared.stderr
    rows = {line.split("│")[1].strip(): line for line in compared.stdout.splitlines() if line.count("│") >= 6}
    assert {"F", "B", "step", "step, median of 2 executed"} <= set(rows)
    assert rows["step"].rstrip(" │").endswith("%")
    assert "differ" not in compared.stderr  # the simulated run is the executed one, by construction
    measured = json.loads(sim3d("compare", "sim", "exec", "--json", cwd=loop).stdout)
    assert measured["real_steps"] == 2 and measured["differences"] == []


def test_the_cpu_profile_prices_what_the_executor_runs(loop):
    profile = Profile.load(loop / "profile.csv")
    provenance = json.loads((loop / "profile.json").read_text())
    assert provenance["threads"] == 1 and provenance["dtype"] == "fp32"  # one thread per rank, tiny's precision
    t = profile.table
    assert set(t.loc[t.kind == "block", "op"]) == {"block", "embedding_block", "head_block"}
    # the executor's optimizer step and gradient copies, per block (sim3d/costs/executor_host.py)
    assert set(t.loc[t.kind == "optimizer", "op"]) == {f"{block}.{what}" for block in ("block", "embedding_block", "head_block")
                                                      for what in ("step", "grad_copies")}
    assert sorted(set(t.loc[t.kind == "concurrency", "group_size"])) == [1, 2]
    scenario = load_scenario(loop / "exec" / "scenario.yaml")
    from sim3d.costs.compute import block_shape
    alone, shared = profile.block_seconds("block", block_shape(scenario), "fp32"), \
        profile.shared_by(2).block_seconds("block", block_shape(scenario), "fp32")
    assert shared == pytest.approx(alone * max(1.0, slowdown(t, 2)))


def test_compare_names_the_keys_that_differ_and_the_sets_that_match_them(loop):
    done = sim3d("run", TINY, "--out", "default", "--no-plots", cwd=loop)
    assert done.returncode == 0, done.stderr
    refused = sim3d("compare", "default", "exec", cwd=loop)
    assert refused.returncode == 2
    message = " ".join(refused.stderr.split())
    assert "parallel.pp (simulated 1, executed 2)" in message
    assert "sim3d run exec/scenario.yaml --set costs.profile=PROFILE" in message
    assert "--set parallel.pp=2 --set cluster.gpus_per_node=2" in message


def test_a_run_that_aligns_but_differs_is_compared_with_a_warning(loop):
    done = sim3d("run", "exec/scenario.yaml", "--set", "training.precision=bf16", "--out", "bf16", "--no-plots",
                 cwd=loop)
    assert done.returncode == 0, done.stderr
    compared = sim3d("compare", "bf16", "exec", cwd=loop)
    assert compared.returncode == 0, compared.stderr
    message = " ".join(compared.stderr.split())
    assert "training.precision (simulated bf16, executed fp32)" in message
    assert "the simulated run priced cluster.gpu a100-80gb (no costs.profile)" in message


def test_a_profile_in_another_precision_is_named_not_silently_bypassed(loop):
    scenario = load_scenario(TINY, ["training.precision=bf16", f"costs.profile={loop / 'profile.csv'}"])
    warned = " ".join(profile_warnings(scenario))
    assert "times its kernels in fp32, not the bf16 of training.precision=bf16" in warned


def _concurrency(times: dict[int, float]) -> pd.DataFrame:
    rows = [{**{c: "" for c in COLUMNS}, "op": "block", "kind": "concurrency", "pass": p, "numel": 1, "group_size": n,
             "dtype": "fp32", "device": "cpu", "seconds": t / 2} for n, t in times.items() for p in ("fwd", "bwd")]
    return pd.DataFrame(rows)


def test_slowdown_interpolates_the_measured_counts_and_saturates_beyond():
    table = _concurrency({1: 1.0, 2: 1.2, 4: 2.0})
    assert slowdown(table, 1) == pytest.approx(1.0)
    assert slowdown(table, 3) == pytest.approx(1.6)
    assert slowdown(table, 8) == pytest.approx(4.0)  # the 4 processes' throughput shared by 8
    assert slowdown(table[table.kind != "concurrency"], 4) is None


def test_a_gpu_profile_is_not_shared():
    profile = Profile.load(ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv")
    assert profile.shared_by(8) is profile


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_the_scenario_an_execution_writes_reads_back_as_the_same_scenario(path, tmp_path):
    from sim3d.executor.launch import scenario_yaml
    scenario = load_scenario(path)
    (tmp_path / "scenario.yaml").write_text(scenario_yaml(scenario))
    assert load_scenario(tmp_path / "scenario.yaml") == scenario


def test_a_block_measured_beside_another_process_is_priced_as_one_alone_then_shared():
    """A row of two processes in their group (calibrate/group_blocks.py) ran at the two-process
    slowdown of the concurrency rows: alone it is that much quicker, and shared by n ranks it
    is slowed as every block is (the ratio at n)."""
    shape = "b=1,s=8,h=8,heads=2,kv=2,ffn=32,vocab=16,act=gelu,tp=1,cp=2"
    rows = [dict(op="block", kind="concurrency", **{"pass": p}, shape=shape, numel=64, group_size=n, dtype="fp32",
                 device="cpu", seconds=s) for n, f in ((1, 1.0), (2, 1.5), (4, 3.0)) for p, s in (("fwd", f), ("bwd", f))]
    rows += [dict(op="block", kind="block", **{"pass": p}, shape=shape, numel=64, group_size=2, dtype="fp32",
                  device="cpu", seconds=s) for p, s in (("fwd", 0.003), ("bwd", 0.006))]
    profile = Profile(pd.DataFrame(rows).reindex(columns=COLUMNS))
    assert profile.block_measured_with_group("block", shape, "fp32")
    assert profile.block_seconds("block", shape, "fp32", "bwd") == pytest.approx(0.006 / 1.5)
    assert profile.shared_by(2).block_seconds("block", shape, "fp32", "fwd") == pytest.approx(0.003)
    assert profile.shared_by(4).block_seconds("block", shape, "fp32", "fwd") == pytest.approx(0.003 / 1.5 * 3.0)
    assert not profile.block_measured_with_group("block", shape.replace(",cp=2", ""), "fp32")


def test_tp_and_cp_layers_are_priced_as_their_group_ran_them(loop):
    """The profile holds the executor's block measured with its tp 2 and its cp 2 group; a
    layout of either prices its layers from those rows (collectives included), a layout of
    neither does not use them."""
    import sim3d
    from sim3d.costs.compute import block_shape
    from sim3d_calibrate.group_blocks import group_variants
    profile = Profile.load(loop / "profile.csv")
    t = profile.table
    grouped = t[(t.kind == "block") & (t.group_size == 2)]
    variants = group_variants(load_scenario(TINY))
    assert {(v.tp, v.cp) for v in variants} == {(2, 1), (1, 2)}
    assert set(grouped["shape"]) == {block_shape(v) for v in variants}
    for sets in (["parallel.cp=2"], ["parallel.tp=2"]):
        result = sim3d.simulate(TINY, sets=[*sets, "cluster.gpus_per_node=2", f"costs.profile={loop / 'profile.csv'}"])
        layer = grouped[(grouped["shape"] == block_shape(result.scenario)) & (grouped["pass"] == "fwd")]
        forward = result.trace[(result.trace["rank"] == 0) & (result.trace["kind"] == "F")]
        # a stage of four layers (and the embedding and head) takes at least its four measured layers
        assert (forward.end_s - forward.start_s).min() >= 4 * float(layer.seconds.iloc[0]) * (1 - 1e-9)
        assert any("measured whole" in what for what, _ in result.explain())
    plain = sim3d.simulate(TINY, sets=["parallel.pp=2", "cluster.gpus_per_node=2", f"costs.profile={loop / 'profile.csv'}"])
    assert block_shape(plain.scenario) not in set(grouped["shape"])


def test_a_layer_too_slow_for_a_cpu_run_is_not_measured_in_two_processes():
    from sim3d_calibrate.group_blocks import MAX_BLOCK_S, measure_group_blocks
    rows, why = measure_group_blocks(load_scenario(TINY), "fp32", True, alone_s=2 * MAX_BLOCK_S)
    assert rows == [] and "more than the" in why
