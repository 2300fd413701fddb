"""The memory-bound kernels of a traced step as a rate (costs/trace_memory.py), the parts of a
step side by side (costs/step_parts.py), and `sim3d compare` of a scenario calibrated from its
own trace against that trace (issue 48's loop)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.costs.compute import is_memory_bound, memory_bytes
from sim3d.costs.kineto import read_trace
from sim3d.costs.profile import Profile
from sim3d.costs.trace_memory import memory_rows
from sim3d.model.ops import head_ops, layer_ops
from sim3d.scenario.load import scenario_from_dict as load_scenario
from sim3d.validation.measured_steps import step_scenario

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "fixtures" / "traces"
_spec = importlib.util.spec_from_file_location("make_two_rank_trace", TRACES / "make_two_rank_trace.py")
maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(maker)

TINY = dict(name="tiny-traced", model=dict(layers=1, hidden=64, heads=4, vocab=512, seq_len=32),
            training=dict(micro_batch=1, global_batch=1, precision="bf16", kernels="eager"),
            cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=1))
BACKWARD_TID = 7777
EW = "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16> >(int, ...)"


def _hand_trace(path: Path) -> Path:
    """One step of TINY's shapes. Counted: forward 100 us over the hidden size, 50 us over the
    vocabulary; backward (another thread) 200 and 80 us. Left out: a GEMM's memset, an
    AccumulateGrad add of a weight's shape, the optimizer, the embedding's backward."""
    w = maker.Writer(0)
    t0 = maker.T0
    w.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": maker.PID,
                     "tid": maker.MAIN_TID, "ts": t0, "dur": 5000.0, "args": {"External id": 1}})
    bf = maker.BF16
    w.call("aten::mul", t0 + 10, [(EW, 100.0)], op_args={"Input Dims": [[1, 32, 64], [1, 32, 64]], "Input type": [bf, bf]})
    w.call("aten::_log_softmax", t0 + 200, [(maker.SOFTMAX, 50.0)], op_args={"Input Dims": [[32, 512]], "Input type": [bf]})
    w.call("aten::mm", t0 + 300, [("Memset (Device)", 7.0)], cat="gpu_memset",
           op_args={"Input Dims": [[32, 64], [64, 512]], "Input type": [bf, bf]})
    w.call("aten::mul", t0 + 400, [(EW, 200.0)], tid=BACKWARD_TID,
           op_args={"Input Dims": [[1, 32, 64], [1, 32, 64]], "Input type": [bf, bf]})
    w.call("aten::_log_softmax_backward_data", t0 + 700, [(maker.SOFTMAX.replace("Forward", "Backward"), 80.0)],
           tid=BACKWARD_TID, op_args={"Input Dims": [[32, 512], [32, 512]], "Input type": [bf, bf]})
    w.call("aten::add_", t0 + 900, [(EW, 999.0)], tid=BACKWARD_TID,
           op_args={"Input Dims": [[192, 64], [192, 64]], "Input type": [bf, bf]})  # the QKV weight's gradient
    w.call("aten::embedding_dense_backward", t0 + 2000, [("void at::native::compute_grad_weight<c10::BFloat16>()", 300.0)],
           tid=BACKWARD_TID, op_args={"Input Dims": [[32, 64], [32]], "Input type": [bf, "long int"]})
    w.call("aten::_fused_adamw_", t0 + 2500, [(maker.ADAMW, 500.0)])
    path.write_text(json.dumps({"traceEvents": w.events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}))
    return path


def test_the_traced_memory_kernels_are_counted_by_hand(tmp_path):
    s = load_scenario(TINY)
    rows, notes = memory_rows([read_trace(_hand_trace(tmp_path / "t.json"))], s)
    assert not notes
    by = {(r["op"], r["pass"]): r for r in rows}
    # the layer and the final norm share the counted kernels over the hidden size by their bytes;
    # the head adds the vocabulary's: the rows add up to the counted time, nothing else
    for p, rest, vocab in (("fwd", 100e-6, 50e-6), ("bwd", 200e-6, 80e-6)):
        i = ("fwd", "bwd").index(p)
        layer = sum(memory_bytes(op)[i] for op in layer_ops(s) if is_memory_bound(op))
        norm = sum(memory_bytes(op)[i] for op in head_ops(s) if is_memory_bound(op) and "cross_entropy" not in op.kernels)
        assert by[("layer.memory", p)]["seconds"] == pytest.approx(rest * layer / (layer + norm))
        assert by[("layer.memory", p)]["bytes"] == pytest.approx(layer)
        assert by[("layer.memory", p)]["seconds"] + by[("head.memory", p)]["seconds"] == pytest.approx(rest + vocab)


def test_a_trace_that_is_not_the_scenarios_job_writes_no_memory_rows(tmp_path):
    trace = read_trace(_hand_trace(tmp_path / "t.json"))
    other_vocab = load_scenario({**TINY, "model": {**TINY["model"], "vocab": 1024}})
    rows, notes = memory_rows([trace], other_vocab)
    assert rows == [] and any("is --scenario the traced job" in why for why in notes)
    piped = load_scenario({**TINY, "model": {**TINY["model"], "layers": 2}, "parallel": {"pp": 2},
                           "training": {**TINY["training"], "global_batch": 2}, "cluster": {**TINY["cluster"], "gpus_per_node": 2}})
    assert memory_rows([trace], piped)[0] == []


def test_other_layouts_price_their_memory_bound_ops_at_the_traced_rate(tmp_path):
    trace = read_trace(_hand_trace(tmp_path / "t.json"))
    s = load_scenario(TINY)
    rows, _ = memory_rows([trace], s)
    profile = tmp_path / "p.csv"
    from sim3d.costs.trace_profile import write_profile
    write_profile([trace], profile, more=(rows, {}))
    rate = Profile.load(profile).block_memory_rate("layer", 1, "bf16", "fwd")  # one row: any size finds it
    assert rate == pytest.approx(rows[0]["bytes"] / rows[0]["seconds"])
    wider = load_scenario({**TINY, "model": {**TINY["model"], "seq_len": 128}, "costs": {"profile": str(profile)}})
    from sim3d.costs.compute import ComputeModel
    ops = layer_ops(wider)
    times, traced = ComputeModel(wider, Profile.load(profile)).block_times(ops, "layer")
    assert traced
    for op, t in zip(ops, times):
        if is_memory_bound(op):
            assert (t.fwd, t.source) == (pytest.approx(memory_bytes(op)[0] / rate), "profile")


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_scenario_calibrated_from_its_own_trace_compares_within_the_spread(tmp_path, mode):
    """Issue 48: on a fixture where the scenario describes the traced job, the step agrees
    within the trace's own step-to-step spread plus 5%, and the parts are set side by side."""
    record = json.loads((ROOT / "validation" / "h200_llama_steps.json").read_text())
    scenario = tmp_path / f"{mode}.yaml"
    scenario.write_text(yaml.safe_dump(step_scenario(record, mode, 2)))
    trace = TRACES / f"llama_{mode}_step.json.gz"
    runner = CliRunner()
    made = runner.invoke(app, ["calibrate", "--from-trace", str(trace), "--out", str(tmp_path / "p.csv"),
                               "--scenario", str(scenario)])
    assert made.exit_code == 0, made.output
    sim = tmp_path / "sim"
    ran = runner.invoke(app, ["run", str(scenario), "--out", str(sim), "--no-plots", "--set", f"costs.profile={tmp_path / 'p.csv'}"])
    assert ran.exit_code == 0, ran.output
    compared = runner.invoke(app, ["compare", str(sim), str(trace), "--json"])
    assert compared.exit_code == 0, compared.output
    result = json.loads(compared.stdout)
    assert abs(result["step_error"]) <= result["traced"]["spread"] + 0.05
    parts = result["parts"]
    assert {"GEMMs", "attention", "memory-bound kernels", "optimizer"} <= set(parts)
    for part in ("GEMMs", "memory-bound kernels"):  # priced from this trace: each within 5% of it
        assert parts[part]["simulated_s"] == pytest.approx(parts[part]["traced_s"], rel=0.05)
    text = runner.invoke(app, ["compare", str(sim), str(trace)]).stdout
    assert "memory-bound kernels" in text and "largest difference" in text


def test_the_readmes_traced_scenario_is_the_traced_job():
    """tests/fixtures/traces/llama_h200_step.yaml is the job of validation/h200_llama_steps.json
    (the README calibrates from its trace with it)."""
    record = json.loads((ROOT / "validation" / "h200_llama_steps.json").read_text())
    shipped = sim3d.load_scenario(TRACES / "llama_h200_step.yaml")
    ran = load_scenario(step_scenario(record, "eager", 2))
    assert (shipped.model, shipped.training, shipped.parallel, shipped.cluster) == \
        (ran.model, ran.training, ran.parallel, ran.cluster)
