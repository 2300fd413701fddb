"""The analytical kernel model against the committed H100 profile (no profile loaded into the
model): the GEMM and attention MAPE are printed and bounded. Same constants for every row;
sim3d/costs/truth.py says how rows are compared, benchmarks/kernel_truth.py prints the detail."""

import math
from pathlib import Path

import pandas as pd
import pytest

from sim3d.cluster.gpus import gpu_preset
from sim3d.costs import truth
from sim3d.costs.attention import attention_seconds
from sim3d.costs.gemm import gemm_seconds
from sim3d.costs.harness import as_measured

PROFILE = Path(__file__).resolve().parents[1] / "calibrate" / "profiles" / "h100-sxm5-80gb.csv"
# Issue 33's bounds, FP8 looser: its rows repeat worse than the issue's 3%. Rows of this profile
# that timed the same FP8 kernels differ by 4.7% (one row's sigma; test_repeat_noise_floor), so
# a perfect model would still show about 3.7% MAPE on FP8 and 2.8% over all GEMMs.
GEMM_16BIT_MAPE, GEMM_FP8_MAPE, ATTENTION_MAPE = 0.03, 0.06, 0.10


@pytest.fixture(scope="module")
def rows():
    return truth.compare(pd.read_csv(PROFILE), gpu_preset("h100-sxm"))


def test_h100_profile_mape(rows, capsys):
    gemm = rows[(rows["kind"] == "gemm") & rows["device_bound"]]
    bf16, fp8 = truth.mape(gemm[gemm["dtype"] == "bf16"]["error"]), truth.mape(gemm[gemm["dtype"] == "fp8"]["error"])
    att = truth.mape(rows[rows["op"] == "attention"]["error"])
    with capsys.disabled():
        print(f"\nH100 profile vs analytical: GEMM bf16 {bf16:.2%} over {int((gemm['dtype'] == 'bf16').sum())} "
              f"device-bound rows, GEMM fp8 {fp8:.2%}, all GEMMs {truth.mape(gemm['error']):.2%}; "
              f"attention {att:.2%} over {int((rows['op'] == 'attention').sum())} rows")
    assert bf16 <= GEMM_16BIT_MAPE
    assert fp8 <= GEMM_FP8_MAPE
    assert att <= ATTENTION_MAPE


def test_repeat_noise_floor(rows, capsys):
    """No price of a kernel removes the spread between two rows that timed it: the FP8 bound sits
    above the floor that spread sets, and the floor is the profile's, not the model's."""
    floor = truth.noise_floor(truth.repeat_pairs(rows)).set_index("dtype")
    with capsys.disabled():
        print("\nH100 profile repeat noise: " + ", ".join(
            f"{d} sigma {r['sigma']:.2%} over {int(r['pairs'])} pairs -> a perfect model's MAPE {r['floor_mape']:.2%}"
            for d, r in floor.iterrows()))
    assert floor.loc["fp8", "pairs"] >= 10 and floor.loc["bf16", "pairs"] >= 4
    assert floor.loc["bf16", "floor_mape"] < floor.loc["fp8", "floor_mape"] < GEMM_FP8_MAPE


def test_repeat_pairs_are_the_same_kernels():
    def row(op, pass_, dtype, m, n, k, error):
        return dict(op=op, kind="gemm", device_bound=True, dtype=dtype, m=m, n=n, k=k, error=error,
                    shape=f"m={m},n={n},k={k}", **{"pass": pass_})
    table = pd.DataFrame([
        row("gemm.mlp_up", "fwd", "bf16", 64, 96, 96, 0.10), row("gemm.mlp_down", "fwd", "bf16", 64, 96, 96, 0.0),
        row("gemm", "bwd", "fp8", 64, 64, 32, 0.0), row("gemm", "fwd", "fp8", 64, 32, 64, -0.10),
        row("gemm", "bwd", "bf16", 64, 64, 32, 0.0), row("gemm", "fwd", "bf16", 64, 32, 64, 0.5),  # other layouts
        row("gemm", "bwd", "fp8", 64, 96, 32, 0.0), row("gemm", "fwd", "fp8", 64, 32, 96, 0.5),  # m != n: two shapes
    ])
    pairs = truth.repeat_pairs(table)
    assert list(pairs["kind"]) == ["repeat", "bwd = 2 x fwd"]
    assert pairs["spread"].to_numpy() == pytest.approx([math.log(1.1), math.log(1 / 0.9)])
    floor = truth.noise_floor(pairs).set_index("dtype")
    assert floor.loc["bf16", "sigma"] == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert floor.loc["fp8", "paired_bound"] == pytest.approx(math.log(1 / 0.9) / 2)


def test_every_gemm_row_is_judged_but_the_host_bound_ones(rows):
    gemm = rows[rows["kind"] == "gemm"]
    assert len(gemm) == 352 and gemm["device_bound"].sum() >= 220
    # a row left out is one that took less than twice the host floor: PyTorch issuing the call
    out = gemm[~gemm["device_bound"]]
    assert (out["seconds"] < truth.DEVICE_BOUND * out["floor_s"]).all()


def test_harness_model_is_only_the_clock_and_the_floor():
    gpu = gpu_preset("h100-sxm")
    long = gemm_seconds(gpu, 16384, 16384, 16384)
    assert as_measured(gpu, "bf16", long) == pytest.approx(long, rel=1e-3)  # seconds of back-to-back GEMMs: soaked
    short = gemm_seconds(gpu, 1024, 1024, 1024)
    assert short / (1 / gpu.sustained_clock("bf16")) < as_measured(gpu, "bf16", short) < short  # a burst: faster
    assert as_measured(gpu, "bf16", short, floor=1.0) == 1.0


def test_the_three_passes_are_their_own_gemms():
    gpu = gpu_preset("h100-sxm")
    # a short, wide forward tiles well, its weight gradient (reduction over the 256 tokens) does not
    fwd = gemm_seconds(gpu, 256, 16384, 16384)
    wgrad = gemm_seconds(gpu, 16384, 16384, 256)
    assert wgrad > 1.3 * fwd


def test_attention_shape_effects():
    gpu = gpu_preset("h100-sxm")
    per_flop = {s: attention_seconds(gpu, 64, s, 128) / s**2 for s in (1024, 4096, 16384)}
    assert per_flop[1024] > per_flop[4096] > per_flop[16384]  # per-CTA cost amortised over longer rows
    few, many = attention_seconds(gpu, 8, 2048, 128) / 8, attention_seconds(gpu, 128, 2048, 128) / 128
    assert few > 1.2 * many  # few heads at a short sequence leave the SMs a ragged tail
    assert attention_seconds(gpu, 32, 4096, 128, "bwd") > 2.5 * attention_seconds(gpu, 32, 4096, 128, "fwd")
    causal, full = attention_seconds(gpu, 32, 8192, 128), attention_seconds(gpu, 32, 8192, 128, causal=False)
    assert 0.45 < causal / full < 0.6
    assert attention_seconds(gpu, 32, 4096, 64) / attention_seconds(gpu, 32, 4096, 128) > 0.5 / 0.69 * 0.9
