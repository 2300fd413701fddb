"""`sim3d.kernel_seconds` and `sim3d kernel`: one kernel's price and where it came from, the
same price a simulation pays; `--explain` shows it for the largest kernel of each class."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.cluster.gpus import gpu_preset
from sim3d.costs.gemm import gemm_seconds

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv"


def test_gemm_is_the_models_price_or_the_profiles():
    a = sim3d.kernel_seconds("h100-sxm", "gemm", m=8192, n=8192, k=8192)
    assert a.source == "analytical" and a.seconds == gemm_seconds(gpu_preset("h100-sxm"), 8192, 8192, 8192)
    p = sim3d.kernel_seconds("h100-sxm", "gemm", m=8192, n=8192, k=8192, profile=PROFILE)
    assert p.source == "profile" and p.seconds == pytest.approx(1.72666e-3)  # the profile's row
    fp8 = sim3d.kernel_seconds("h100-sxm", "gemm", m=8192, n=8192, k=8192, precision="fp8")
    assert fp8.seconds < 0.6 * a.seconds
    with pytest.raises(sim3d.ScenarioError, match="no fp8 tensor cores"):
        sim3d.kernel_seconds("a100-80gb", "gemm", m=64, n=64, k=64, precision="fp8")


def test_attention_directions_gqa_and_causality():
    shape = dict(batch=2, heads=32, seq=4096, head_dim=128)
    fwd = sim3d.kernel_seconds("h100-sxm", "attention", **shape)
    bwd = sim3d.kernel_seconds("h100-sxm", "attention", direction="bwd", **shape)
    full = sim3d.kernel_seconds("h100-sxm", "attention", causal=False, **shape)
    gqa = sim3d.kernel_seconds("h100-sxm", "attention", kv_heads=8, **shape)
    assert 2.5 * fwd.seconds < bwd.seconds and 1.6 * fwd.seconds < full.seconds < 2 * fwd.seconds
    assert gqa.seconds <= fwd.seconds  # fewer K/V bytes, the same work
    measured = sim3d.kernel_seconds("h100-sxm", "attention", profile=PROFILE, **shape)
    assert measured.source == "profile"
    assert sim3d.kernel_seconds("h100-sxm", "attention", profile=PROFILE, causal=False, **shape).source == "analytical"


def test_memory_bound_kernels_and_collectives():
    norm = sim3d.kernel_seconds("h100-sxm", "rmsnorm", numel=2**25)
    assert norm.source == "analytical" and norm.seconds == pytest.approx(4 * 2**25 / (3.35e12 * 0.8) + 3e-6)
    assert sim3d.kernel_seconds("h100-sxm", "rmsnorm", numel=2**25, profile=PROFILE).source == "profile"
    assert sim3d.kernel_seconds("h100-sxm", "memory", nbytes=1e9).seconds == pytest.approx(1e9 / 2.68e12 + 3e-6)
    node = sim3d.kernel_seconds("h100-sxm", "all_reduce", nbytes=2**30, group=8)
    two = sim3d.kernel_seconds("h100-sxm", "all_reduce", nbytes=2**30, group=16, nodes=2)
    assert "nvls" in node.detail and two.seconds > node.seconds


@pytest.mark.parametrize("op, shape, message", [
    ("gem", {}, "did you mean gemm"),
    ("gemm", dict(m=1, n=2), "missing k"),
    ("gemm", dict(m=1, n=2, k=0), "k must be a positive integer"),
    ("gemm", dict(m=1, n=2, k=3, depth=4), "unknown argument"),
    ("attention", dict(batch=1, heads=6, seq=64, head_dim=64, kv_heads=4), "not a multiple"),
    ("all_gather", dict(nbytes=1, group=16), "at most 8"),
    ("attention", dict(batch=1, heads=4, seq=64, head_dim=64, causal="no"), "causal must be true or false"),
    ("attention", dict(batch=1, heads=4, seq=64, head_dim=64, causal=1), "causal must be true or false"),
])
def test_bad_shapes_are_refused_by_name(op, shape, message):
    with pytest.raises(sim3d.ScenarioError, match=message):
        sim3d.kernel_seconds("h100-sxm", op, **shape)


def test_simulation_pays_the_same_price():
    s = sim3d.load_scenario(ROOT / "scenarios" / "llama3.1-8b.yaml")
    from sim3d.costs.compute import ComputeModel
    from sim3d.model.ops import layer_ops
    model = ComputeModel(s)
    op = next(o for o in layer_ops(s) if o.name == "mlp_up")
    m, n, k = op.gemm
    # the op's forward is its GEMM (the op passes its own byte count; compute-bound here)
    assert model.op_time(op).fwd == pytest.approx(sim3d.kernel_seconds(s.gpu, "gemm", m=m, n=n, k=k).seconds)


def test_cli_prints_price_source_and_json():
    runner = CliRunner()
    text = runner.invoke(app, ["kernel", "gemm", "m=4096", "n=4096", "k=4096", "--gpu", "b200"])
    assert text.exit_code == 0 and "TFLOP/s" in text.stdout and "source: analytical" in text.stdout
    data = runner.invoke(app, ["kernel", "attention", "batch=1", "heads=8", "seq=2048", "head_dim=128",
                               "direction=bwd", "--profile", str(PROFILE), "--json"])
    parsed = json.loads(data.stdout)
    assert parsed["source"] == "profile" and parsed["direction"] == "bwd" and parsed["seconds"] > 0
    for bad in (["kernel", "gemm", "m"], ["kernel", "gemm", "m=1", "n=1"], ["kernel", "gemm", "m=1", "n=1", "k=1",
                                                                          "--gpu", "h1000"]):
        result = runner.invoke(app, bad)
        assert result.exit_code == 2, result.output


def test_explain_prices_the_largest_kernel_of_each_class():
    rows = dict(sim3d.simulate(ROOT / "scenarios" / "llama3.1-8b.yaml").explain())
    assert "largest: lm_head [4096 x 4096] @ [4096 x 128256] bf16" in rows["compute: GEMMs (16-bit)"]
    assert "largest: core_attention" in rows["compute: attention (flash: fused kernel)"]
    assert "(analytical, sim3d kernel)" in rows["compute: rmsnorm"]


def test_shapes_beyond_one_kernel_are_refused_not_priced():
    """10^23 rows were priced (600 million years) and 10^300 raised OverflowError."""
    from sim3d.scenario import ScenarioError
    for shape in ({"m": 10**23, "n": 8, "k": 8}, {"m": 10**300, "n": 8, "k": 8}):
        with pytest.raises(ScenarioError, match="more than one kernel takes"):
            sim3d.kernel_seconds("h100-sxm", "gemm", **shape)
    with pytest.raises(ScenarioError, match="a TiB in one collective"):
        sim3d.kernel_seconds("h100-sxm", "all_reduce", nbytes=1e30, group=8)
    assert sim3d.kernel_seconds("h100-sxm", "gemm", m=2**31 - 1, n=8, k=8).seconds > 0
