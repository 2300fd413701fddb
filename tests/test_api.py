"""One prediction, computed once: the library call, its time breakdown, the profile honoured by
every consumer, and one step schedule for run, validate and execute."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.engine.replay import BREAKDOWN_PARTS
from sim3d.step import step_schedule
from sim3d.studies.sweep import run_sweep

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny.yaml"
CPU_PROFILE = ROOT / "calibrate" / "profiles" / "cpu-amd-epyc.csv"


def test_import_and_simulate_without_torch():
    code = ("import sys, sim3d; r = sim3d.simulate('scenarios/tiny.yaml'); "
            "print(r.breakdown['compute'] > 0, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]
    assert sim3d.__version__


MESH = dict(name="mesh", model=dict(layers=8, hidden=1024, heads=16, vocab=32000, seq_len=2048),
            training=dict(micro_batch=1, global_batch=32, attention_backend="flash"))


@pytest.mark.parametrize("case", [
    dict(parallel=dict(tp=2, pp=4, dp=2), training=dict(recompute="full")),
    dict(parallel=dict(tp=4, pp=2, dp=2, sequence_parallel=True, distributed_optimizer=True),
         training=dict(recompute="selective", tp_comm_overlap=True, overlap_grad_reduce=True)),
    dict(parallel=dict(tp=2, pp=2, dp=2, cp=2), training=dict(overlap_p2p=False)),
    dict(parallel=dict(tp=2, pp=4, dp=2, vpp=2), schedule="interleaved-1f1b"),
    dict(parallel=dict(tp=1, pp=4, dp=4), schedule="zb-h1", full=True,
         faults=[dict(straggler=dict(rank=5, slowdown=1.5))]),
    dict(parallel=dict(tp=2, pp=2, dp=4), full=True),
], ids=["recompute-full", "sp-overlap-selective", "cp-blocking-p2p", "interleaved", "zb-straggler", "full-fidelity"])
def test_breakdown_adds_up_to_the_step_on_the_critical_rank(case):
    case = dict(case)
    full = case.pop("full", False)
    raw = {**MESH, **case, "training": {**MESH["training"], **case.get("training", {})}}
    gpus = raw["parallel"]["tp"] * raw["parallel"]["pp"] * raw["parallel"]["dp"] * raw["parallel"].get("cp", 1)
    raw["cluster"] = dict(gpu="h100-sxm", nodes=max(1, gpus // 8), gpus_per_node=min(8, gpus))
    r = sim3d.simulate(raw, full_fidelity=full)
    parts = r.breakdown
    assert tuple(parts) == BREAKDOWN_PARTS
    assert all(v >= -1e-12 for v in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(r.step_time, rel=1e-9)
    assert r.summary["breakdown"] == parts
    # every rank's own parts add up to its own finish time
    for rank in r.sim.ranks:
        assert sum(r.sim.breakdown(rank).values()) == pytest.approx(r.sim.finish[rank], rel=1e-9)
    recompute = raw["training"].get("recompute", "none")
    assert (parts["recompute"] > 0) == (recompute != "none")



@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_the_tied_embedding_all_reduce_is_communication_not_optimizer(activation):
    """A GPT-style model (tied LM head) with pp 2 all-reduces its word embedding's gradients
    between the two stages before the optimizer step. On 1 Mb/s NICs that takes minutes: the
    breakdown books them as the all-reduce, and the optimizer part keeps only its kernels.
    An untied (Llama-style) head has nothing to exchange."""
    from sim3d.analysis.summary import breakdown_table
    from sim3d.costs.cost_model import CostModel
    raw = {**MESH, "model": {**MESH["model"], "activation": activation}, "parallel": dict(tp=1, pp=2, dp=1),
           "cluster": dict(gpu="h100-sxm", nodes=2, gpus_per_node=1, inter_node=dict(nic_gbps=0.001))}
    r = sim3d.simulate(raw)
    parts, rank = r.breakdown, r.sim.critical_rank
    costs = CostModel(r.scenario)
    stage = costs.placement.coords(rank)["pp"]  # pp 2, vpp 1: the pipeline rank is the stage
    assert sum(parts.values()) == pytest.approx(r.step_time, rel=1e-9)
    assert parts["optimizer"] == pytest.approx(costs.optimizer(rank, (stage,)), rel=1e-9)
    assert parts["optimizer"] < 0.1
    assert parts["embedding_sync"] == pytest.approx(costs.embedding_sync(rank, (stage,)), rel=1e-9)
    if activation == "gelu":
        assert parts["embedding_sync"] > 100  # 32000 x 1024 gradients at 1 Mb/s
        assert any("embedding gradient all-reduce" in cell for cell in breakdown_table(r.summary).columns[0].cells)
    else:
        assert parts["embedding_sync"] == 0.0

def test_a_sweep_predicts_what_run_predicts_with_a_profile(tmp_path):
    grid = {"costs.profile": [str(CPU_PROFILE)], "training.micro_batch": ["1", "2"]}
    results = run_sweep(TINY, grid, tmp_path / "sweep", workers=1)
    rows = list(csv.DictReader(results.open()))
    assert len(rows) == 2
    for row in rows:
        expected = sim3d.simulate(TINY, sets=(f"costs.profile={CPU_PROFILE}",
                                              f"training.micro_batch={row['training.micro_batch']}")).step_time
        assert math.isclose(float(row["step_time_s"]), expected, rel_tol=1e-12)
    # and the profile changed the answer (the analytical A100 model is far faster than this CPU)
    assert float(rows[0]["step_time_s"]) > 3 * sim3d.simulate(TINY).step_time


@pytest.mark.parametrize("command", [
    ("run", TINY, "--set", "costs.profile=missing.csv", "--no-plots"),
    ("validate", TINY, "--set", "costs.profile=missing.csv"),
    ("sweep", TINY, "--grid", "costs.profile=missing.csv"),
    ("plan", TINY, "--gpus", "1"),
], ids=["run", "validate", "sweep", "plan"])
def test_a_missing_profile_is_exit_2_everywhere(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [str(a) for a in command] + (["--out", str(tmp_path / "out")] if command[0] in ("run", "sweep") else [])
    if command[0] == "plan":  # plan takes the profile from the scenario file
        bad = tmp_path / "bad.yaml"
        bad.write_text(TINY.read_text() + "costs: {profile: missing.csv}\n")
        args[1] = str(bad)
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "no such profile file" in result.output


@pytest.mark.parametrize("path, sets", [
    ("scenarios/gpt3.yaml", ()),
    ("scenarios/tiny.yaml", ("parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "cluster.gpus_per_node=8",
                             "parallel.distributed_optimizer=true")),
    ("scenarios/llama3.1-70b.yaml", ()),
])
def test_run_validate_and_execute_lower_the_same_schedule(path, sets):
    from sim3d.executor.launch import make_spec
    from sim3d.executor.runtime import make_schedule
    s = sim3d.load_scenario(ROOT / path, sets)
    replayed = sim3d.simulate(s).schedule
    proved = step_schedule(s)  # what `sim3d validate` proves
    assert replayed.ranks == proved.ranks
    if s.cp == 1:  # the executor refuses context parallelism
        assert make_schedule(make_spec(s)).ranks == replayed.ranks
    kinds = {a.kind.value for rank in replayed.ranks for a in rank}
    assert "DP_REDUCE" in kinds


@given(data=st.data(), tp=st.sampled_from([2, 4, 8]), pp=st.sampled_from([1, 2, 4]))
@settings(max_examples=12, deadline=None)
def test_a_slow_nic_on_any_node_slows_the_step(data, tp, pp):
    """Costs used to be priced on pipeline 0's groups only: a degraded NIC on most nodes was
    invisible. Now, for every node k, folded and at full fidelity."""
    dp = 32 // (tp * pp)
    base = dict(name="nic", model=dict(layers=8, hidden=2048, heads=16, vocab=32000, seq_len=2048),
                parallel=dict(tp=tp, pp=pp, dp=dp), training=dict(micro_batch=1, global_batch=4 * dp),
                cluster=dict(gpu="a100-80gb", nodes=4, gpus_per_node=8))
    k = data.draw(st.integers(0, 3), label="node")
    slow = {**base, "faults": [dict(link=dict(node=k, nic_gbps=5))]}
    healthy = sim3d.simulate(base).step_time
    assert sim3d.simulate(slow).step_time > healthy
    assert sim3d.simulate(slow, full_fidelity=True).step_time > healthy


def test_overrides_mean_the_same_on_a_path_a_dict_and_a_scenario():
    import yaml
    path = ROOT / "scenarios" / "mesh-32.yaml"
    want = {"parallel.tp": 4, "parallel.dp": 2, "training.recompute": "selective"}
    by_path = sim3d.simulate(path, **want)
    by_dict = sim3d.simulate(yaml.safe_load(path.read_text()), **want)
    by_scenario = sim3d.simulate(sim3d.load_scenario(path), **want)
    by_sets = sim3d.simulate(path, sets=[f"{k}={v}" for k, v in want.items()])
    assert by_path.scenario.tp == 4 and by_path.scenario.training.recompute == "selective"
    assert by_path.step_time == by_dict.step_time == by_scenario.step_time == by_sets.step_time
    assert by_path.step_time != sim3d.simulate(path).step_time


def test_costs_are_asked_per_global_rank():
    """A slow NIC on node 3 of a tp8 pp2 dp2 layout (one TP group per node; dp pairs nodes
    0-1 for stage 0 and 2-3 for stage 1): exact costs slow only what crosses node 3, folded
    costs price every rank of a stage as the slowest it stands for."""
    from sim3d.costs.cost_model import CostModel
    base = dict(name="nic", model=dict(layers=8, hidden=2048, heads=16, vocab=32000, seq_len=2048),
                parallel=dict(tp=8, pp=2, dp=2), training=dict(micro_batch=1, global_batch=8),
                cluster=dict(gpu="a100-80gb", nodes=4, gpus_per_node=8))
    healthy = CostModel(sim3d.scenario.load.scenario_from_dict(base), folded=False)
    faulty = sim3d.scenario.load.scenario_from_dict({**base, "faults": [dict(link=dict(node=3, nic_gbps=5)),
                                                                   dict(straggler=dict(rank=5, slowdown=1.5))]})
    exact, folded = CostModel(faulty, folded=False), CostModel(faulty, folded=True)
    assert exact.dp_reduce(0, 0, 1) == healthy.dp_reduce(0, 0, 1)  # nodes 0-1
    assert exact.dp_reduce(16, 1, 1)[0] > healthy.dp_reduce(16, 1, 1)[0]  # nodes 2-3
    assert exact.transfer(0, 16) == healthy.transfer(0, 16)  # node 0 -> node 2
    assert exact.transfer(8, 24) > healthy.transfer(8, 24)  # node 1 -> node 3
    assert folded.transfer(0, 16) == exact.transfer(8, 24)  # the slowest pipeline
    assert folded.dp_reduce(0, 1, 1) == exact.dp_reduce(16, 1, 1)  # the slowest dp group
    forward = healthy.compute(5, 0, "F").seconds
    assert exact.compute(5, 0, "F").seconds == pytest.approx(1.5 * forward)  # the straggler
    assert exact.compute(4, 0, "F").seconds == forward  # its TP peer computes as fast as ever
    assert folded.compute(0, 0, "F").seconds == pytest.approx(1.5 * forward)  # stage 0 waits for it
    assert folded.compute(16, 1, "F").seconds == healthy.compute(16, 1, "F").seconds


def test_import_sim3d_is_lazy_but_complete():
    """`import sim3d` and the CLI module import no simulator (the plotting process is forked
    first); public names and submodules still resolve on first use."""
    import subprocess
    import sys
    code = ("import sys, sim3d, sim3d.cli.app; heavy = [m for m in ('sim3d.api', 'sim3d.engine', 'pandas', 'networkx') "
            "if m in sys.modules]; print(heavy); from sim3d import *; "
            "print(simulate.__name__, sim3d.cluster.topology.Topology.__name__, sim3d.ScenarioError.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "simulate Topology ScenarioError"


def test_full_fidelity_takes_a_bool_not_a_truthy_text():
    with pytest.raises(TypeError, match="full_fidelity"):
        sim3d.simulate(ROOT / "scenarios" / "tiny.yaml", full_fidelity="no")


def test_numpys_booleans_are_booleans():
    """np.bool_ (what a comparison of numpy values gives) was refused as 'not a valid boolean'."""
    import numpy as np
    off = sim3d.simulate(ROOT / "scenarios" / "tiny.yaml", **{"training.overlap_p2p": np.bool_(False)})
    assert off.scenario.training.overlap_p2p is False
