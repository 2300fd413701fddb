"""`training.kernels.mask: materialized` (scenario/kernels.py): a 4-D mask handed to SDPA, as
Hugging Face transformers' models do under torch.compile. Hand counts of what it adds: the
key blocks the kernel visits without its causal flag, transformers' repeat_kv copies, the
repeated K and V kept for the backward; and the H100 step file's compiled rows it prices."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import sim3d
from sim3d.cluster.gpus import PRESETS
from sim3d.costs.attention import HOPPER, attention_seconds
from sim3d.costs.compute import ComputeModel
from sim3d.model.ops import Dims, ops_for
from sim3d.scenario import scenario_from_dict
from sim3d.validation.measured_steps import measured_steps, step_scenario

ROOT = Path(__file__).resolve().parents[1]
STEPS = json.loads((ROOT / "validation" / "h100_llama_steps.json").read_text())
B, S, H, HEADS, KV, HD = 1, 4096, 4096, 32, 8, 128


def dims(mask: str, stack: str = "compiled") -> Dims:
    return Dims(b=B, s=S, h=H, heads=HEADS, kv_heads=KV, head_dim=HD, ffn=14336, vocab=128256,
                activation="swiglu", precision="bf16", flash=True, hidden_dropout=False,
                attention_dropout=False, stack=stack, mask=mask)


def by_name(d: Dims) -> dict:
    return {op.name: op for op in ops_for(d)}


def test_without_the_causal_flag_every_key_block_is_visited():
    """4096 queries in blocks of 128: 32 query blocks see 1 + 2 + ... + 32 = 528 key blocks under
    the causal flag and 32 x 32 = 1024 without it; each CTA also pays its fixed cost (4.5 key
    blocks forward on Hopper). With 8192 heads the last CTA's tail is negligible. The backward
    visits the same 496 more blocks per head at 2.5x the work each, at its own efficiency."""
    gpu = PRESETS["h100-sxm"]
    fwd_causal, fwd_unmasked = (attention_seconds(gpu, 8192, S, HD, "fwd", causal=c) for c in (True, False))
    fixed = HOPPER.fwd_cta_blocks
    assert fwd_unmasked / fwd_causal == pytest.approx((1024 + 32 * fixed) / (528 + 32 * fixed), rel=0.01)
    bwd_causal, bwd_unmasked = (attention_seconds(gpu, 8192, S, HD, "bwd", causal=c) for c in (True, False))
    per_extra_block = 2.5 * HOPPER.fwd_efficiency / HOPPER.bwd_efficiency
    assert (bwd_unmasked - bwd_causal) / (fwd_unmasked - fwd_causal) == pytest.approx(per_extra_block, rel=0.01)


def test_a_materialized_mask_repeats_k_and_v_and_reads_the_bias():
    """K and V of 8 heads copied to 32: each copy reads 4096 x 1024 and writes 4096 x 4096 bf16
    values, forward and (the group sums) backward; SDPA keeps the repeated K and V, 2 x 2 bytes x
    4096 x (4096 - 1024) more than the grouped ones; the kernel reads K and V at 32 heads and the
    4096 x 4096 bf16 bias."""
    causal, materialized = by_name(dims("causal")), by_name(dims("materialized"))
    assert "repeat_kv" not in causal
    copy = 2 * S * (1024 + 4096)
    repeat = materialized["repeat_kv"]
    assert repeat.kernel_bytes == ((copy, copy), (copy, copy))
    assert repeat.act_bytes == 2 * 2 * S * (4096 - 1024)
    assert repeat.recompute_selective  # recomputed with the core attention, as SDPA's inputs
    core_c, core_m = causal["core_attention"], materialized["core_attention"]
    assert core_c.causal and not core_m.causal
    assert core_m.fwd_bytes - core_c.fwd_bytes == 2 * S * 2 * (4096 - 1024) + 2 * S * S
    assert core_m.fwd_flops == core_c.fwd_flops  # model FLOPs do not change (ops.py conventions)
    # no repeat without grouped heads
    assert "repeat_kv" not in by_name(replace(dims("materialized"), kv_heads=HEADS))


def test_the_step_grows_by_what_the_ops_add():
    """One GPU, nothing overlaps: the step grows by the attention kernel's unmasked blocks and the
    copies, once per layer and micro-batch."""
    def priced(mask):
        raw = step_scenario(STEPS, "compiled", 1, mask)
        s = scenario_from_dict(raw)
        model = ComputeModel(s)
        ops = {op.name: model.op_time(op) for op in ops_for(Dims.of(s))}
        return sim3d.simulate(raw).summary["step_time_s"], ops
    (causal_s, causal_ops), (masked_s, masked_ops) = priced("causal"), priced("materialized")
    def total(t):
        return t.fwd + t.bwd_input + t.bwd_weight
    per_layer = (total(masked_ops["core_attention"]) - total(causal_ops["core_attention"])
                 + total(masked_ops["repeat_kv"]))
    layers, microbatches = STEPS["scenario_equivalent"]["model"]["layers"], 8
    assert masked_s - causal_s == pytest.approx(layers * microbatches * per_layer, rel=0.02)
    assert masked_s > causal_s


def test_profiled_causal_rows_are_scaled_to_the_unmasked_kernel():
    """Profiles time causal calls: the materialized mask's price from the H100 profile is its
    causal row times the analytical unmasked / causal ratio."""
    def attention_time(mask):
        raw = step_scenario(STEPS, "compiled", 1, mask)
        raw["costs"] = {"profile": str(ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv")}
        s = scenario_from_dict(raw)
        from sim3d.costs.profile import load_profile
        model = ComputeModel(s, load_profile(s))
        op = next(op for op in ops_for(Dims.of(s)) if op.name == "core_attention")
        return model.op_time(op), model._unmasked_over_causal(op, "fwd")
    (causal, _), (masked, ratio) = attention_time("causal"), attention_time("materialized")
    assert causal.source == masked.source == "profile"
    assert masked.fwd == pytest.approx(causal.fwd * ratio)
    assert 1.5 < ratio < 2.0


@pytest.mark.parametrize("change, message", [
    ({"kernels": {"stack": "te", "mask": "materialized"}}, "Transformer Engine passes its causal mask type"),
    ({"kernels": {"stack": "compiled", "mask": "materialized"}, "attention_backend": "unfused"},
     "unfused attention computes every score"),
])
def test_a_mask_where_none_can_be_handed_is_refused(change, message):
    raw = step_scenario(STEPS, "compiled", 1)
    raw["training"].update(change)
    with pytest.raises(sim3d.ScenarioError, match=message):
        scenario_from_dict(raw)


def test_pytorchs_context_parallelism_takes_no_mask():
    raw = step_scenario(STEPS, "compiled", 1, "materialized")
    raw["parallel"]["cp"] = 2
    raw["cluster"]["gpus_per_node"] = 2
    with pytest.raises(sim3d.ScenarioError, match="context parallelism runs causal attention only"):
        scenario_from_dict(raw)


def test_the_h100_files_four_steps_within_five_percent():
    """Hugging Face's Llama (validation/h100_llama_steps.json): eager with is_causal, compiled
    with the materialized mask transformers keeps while dynamo traces. Eager > compiled > te."""
    steps = measured_steps(ROOT / "validation" / "h100_llama_steps.json")
    print("\n" + "\n".join(f"{s.mode} mbs {s.micro_batch}: measured {s.measured_s:.3f} s, sim3d "
                           f"{s.predicted_s:.3f} s ({s.error:+.1%}), as te {s.te_s:.3f} s" for s in steps))
    assert len(steps) == 4
    for s in steps:
        assert abs(s.error) <= 0.05, s
    for mbs in (1, 2):
        eager, compiled = (next(s for s in steps if s.mode == m and s.micro_batch == mbs) for m in ("eager", "compiled"))
        assert eager.predicted_s > compiled.predicted_s > compiled.te_s


def test_a_masked_call_cannot_name_a_kernel_sdpa_does_not_dispatch_it_to():
    raw = step_scenario(STEPS, "compiled", 1, "materialized")
    raw["training"]["kernels"]["attention"] = "fa2"
    with pytest.raises(sim3d.ScenarioError, match="does not take"):
        scenario_from_dict(raw)


def test_explain_prices_the_largest_attention_kernel_with_its_mask(tmp_path):
    import yaml
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    path = tmp_path / "masked.yaml"
    path.write_text(yaml.safe_dump(step_scenario(STEPS, "compiled", 1, "materialized")))
    result = CliRunner().invoke(app, ["run", str(path), "--explain", "--no-plots", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "every key block (a materialized mask)" in " ".join(result.output.split())
