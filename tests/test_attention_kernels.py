"""FlashAttention-2 and -3 on Hopper (`training.kernels.attention: fa2 | fa3`) against the FA3
paper's H100 figures (costs/attention_figures.py), and the choice of kernel per GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs import attention_figures as figures
from sim3d.costs.attention import FA2_HOPPER, FA3_HOPPER, HOPPER
from sim3d.costs.compute import ComputeModel
from sim3d.model.ops import layer_ops
from sim3d.scenario import ScenarioError, load_scenario

FITTED = {"fa2": FA2_HOPPER, "fa3": FA3_HOPPER}
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.mark.parametrize("kernel", ["fa2", "fa3"])
def test_the_constants_are_the_figures_fit(kernel, capsys):
    fitted, errors = figures.fit(kernel)
    committed = FITTED[kernel]
    with capsys.disabled():
        print(f"\n{kernel} on H100 vs FA3 paper Figs. 5d / 6b: MAPE forward {errors['fwd']:.1%}, "
              f"backward {errors['bwd']:.1%}")
    assert (committed.fwd_efficiency, committed.bwd_efficiency) == pytest.approx(
        (fitted.fwd_efficiency, fitted.bwd_efficiency), abs=1e-3)
    assert (committed.fwd_cta_blocks, committed.bwd_cta_blocks) == (fitted.fwd_cta_blocks, fitted.bwd_cta_blocks)
    assert max(errors.values()) < 0.05


@pytest.mark.parametrize("kernel", ["fa2", "fa3"])
def test_head_dim_64_follows_the_figures_it_was_not_fitted_to(kernel):
    # only the 16k ratio prices head dim 64; 2k-8k are the model's shape against the figure
    for direction, points in figures.FIGURES_HEAD_DIM_64[kernel].items():
        for seq in (2048, 4096, 8192, 16384):
            model = figures.model_tflops(FITTED[kernel], direction, seq, head_dim=64)
            assert model == pytest.approx(points[seq], rel=0.10), (direction, seq)


def test_fa3_over_fa2_is_the_papers_speedup():
    # section 4.1: "1.5-2.0x faster than FlashAttention-2 in the forward pass and 1.5-1.75x
    # faster in the backward pass" (medium and long sequences)
    for seq in (2048, 4096, 8192, 16384):
        fwd = figures.model_tflops(FA3_HOPPER, "fwd", seq) / figures.model_tflops(FA2_HOPPER, "fwd", seq)
        bwd = figures.model_tflops(FA3_HOPPER, "bwd", seq) / figures.model_tflops(FA2_HOPPER, "bwd", seq)
        assert 1.5 <= fwd <= 2.0 and 1.5 <= bwd <= 1.75, seq


def _with_kernel(name: str, kernel: str):
    return load_scenario(SCENARIOS / name, [f"training.kernels.attention={kernel}", "training.attention_backend=flash"])


def test_a_named_kernel_with_unfused_attention_is_refused():
    with pytest.raises(ScenarioError, match="triton names a fused attention kernel, but training.attention_backend"):
        load_scenario(SCENARIOS / "llama3.1-8b.yaml", ["training.kernels.attention=triton",
                                                        "training.attention_backend=unfused"])


def test_each_gpu_names_only_kernels_it_has_figures_for():
    for kernel in ("fa3", "cudnn"):  # gpt3.yaml runs on A100s
        with pytest.raises(ScenarioError, match=f"{kernel} has no figures for a100-80gb"):
            _with_kernel("gpt3.yaml", kernel)
    a100 = ComputeModel(_with_kernel("gpt3.yaml", "fa2"))
    assert a100.attention_family is ComputeModel(_with_kernel("gpt3.yaml", "default")).attention_family
    h100 = {k: ComputeModel(_with_kernel("llama3.1-8b.yaml", k)) for k in ("default", "cudnn", "fa2", "fa3")}
    assert h100["default"].attention_family is h100["cudnn"].attention_family is HOPPER
    assert h100["fa2"].attention_family is FA2_HOPPER and h100["fa3"].attention_family is FA3_HOPPER
    # a profile prices a kernel from the rows that timed it: SDPA's default, or that backend forced
    assert [h100[k].attention_rows for k in ("default", "cudnn", "fa2", "fa3")] == [
        "attention", "attention.cudnn", "attention.flash", None]


def test_kernel_seconds_prices_the_kernel_named():
    from sim3d import kernel_seconds
    shape = dict(batch=2, heads=32, seq=4096, head_dim=128)
    own, fa2, fa3 = (kernel_seconds("h100-sxm", "attention", kernel=k, **shape).seconds for k in ("cudnn", "fa2", "fa3"))
    assert fa2 > 1.4 * own and fa2 > 1.5 * fa3  # cuDNN 9.19 and FA3 both outrun FA2 on Hopper
    with pytest.raises(ScenarioError, match="'fa3' has no figures for a100-80gb"):
        kernel_seconds("a100-80gb", "attention", kernel="fa3", **shape)


def test_fa2_fitted_to_the_paper_prices_the_h100_profiles_own_fa2_rows(capsys):
    # an independent truth: the committed H100 profile forced SDPA's flash backend (FA2) on 8
    # shapes x 2 directions (op attention.flash); the constants never saw these rows
    import pandas as pd
    from sim3d.cluster.gpus import gpu_preset
    from sim3d.costs import truth
    table = pd.read_csv(SCENARIOS.parent / "calibrate" / "profiles" / "h100-sxm5-80gb.csv")
    gpu = gpu_preset("h100-sxm")
    errors = {name: truth.compare(table, gpu, attention_ops=("attention.flash",), family=family)
              .query("kind == 'attention'")["error"] for name, family in (("fa2", FA2_HOPPER), ("cudnn", HOPPER))}
    fa2, cudnn = truth.mape(errors["fa2"]), truth.mape(errors["cudnn"])
    with capsys.disabled():
        print(f"\nH100 profile's FA2 rows: fa2 constants {fa2:.1%} MAPE, cuDNN's constants {cudnn:.1%}")
    assert fa2 <= 0.12 and fa2 < cudnn / 3


def test_with_a_profile_each_kernel_takes_its_own_rows():
    from sim3d.costs.profile import Profile
    profile = Profile.load(SCENARIOS.parent / "calibrate" / "profiles" / "h100-sxm5-80gb.csv")
    shape = (2, 32, 2048, 128, "bf16", "fwd")
    flash, cudnn = (profile.attention_seconds(*shape, op=op) for op in ("attention.flash", "attention.cudnn"))
    assert flash > 1.3 * cudnn  # measured: FA2 is the slower kernel on an H100
    op = next(o for o in layer_ops(_with_kernel("llama3.1-8b.yaml", "fa2")) if o.attention is not None)
    priced = {k: ComputeModel(_with_kernel("llama3.1-8b.yaml", k), profile).op_time(op) for k in ("fa2", "cudnn", "fa3")}
    assert priced["fa2"].source == priced["cudnn"].source == "profile" and priced["fa3"].source == "analytical"
    assert priced["fa2"].fwd > 1.3 * priced["cudnn"].fwd
