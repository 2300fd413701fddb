"""Fitting the analytical model to a profile (sim3d/costs/fit.py; `python -m sim3d_calibrate --fit`):
a profile generated from known constants gives them back, and a real profile becomes a preset
record that simulates."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sim3d.cluster.gpus import GpuSpec, PRESETS, gpu_preset, register_preset
from sim3d.costs import fit, truth
from sim3d.costs.attention import FAMILIES
from sim3d.costs.collectives import bus_factor
from sim3d.costs.harness import as_measured

ROOT = Path(__file__).resolve().parents[1]
TRUE = dict(efficiency=0.62, overhead=96.0, memory_efficiency=0.7, kernel_overhead_s=5e-6, busbw=150.0, latency=20e-6)
ATTENTION = dict(fwd_efficiency=0.7, bwd_efficiency=0.55, fwd_cta_blocks=3.0, bwd_cta_blocks=1.5)


def _row(**kw):
    row = dict(op="", kind="", shape="", m=None, n=None, k=None, numel=None, bytes=None, group_size=None,
               dtype="bf16", device="cuda", seconds=0.0, tflops=None, gbps=None, **{"pass": "fwd"})
    row.update(kw)
    return row


def synthetic_profile() -> pd.DataFrame:
    """What the harness would record from an H100 whose GEMMs ran at TRUE's constants."""
    h100 = gpu_preset("h100-sxm")
    truth_gpu = dataclasses.replace(h100, gemm_burst_efficiency_16=TRUE["efficiency"])
    family = dataclasses.replace(FAMILIES["hopper"], **ATTENTION)
    rows = []
    for m in (256, 1024, 4096, 16384):
        for n in (512, 2048, 8192):
            for k in (512, 2048, 8192):
                for pass_ in ("fwd", "bwd"):
                    device = truth.gemm_device_seconds(truth_gpu, m, n, k, "bf16", pass_, TRUE["overhead"])
                    rows.append(_row(op="gemm", kind="gemm", shape=f"m={m},n={n},k={k}", m=m, n=n, k=k, numel=m * n,
                                     seconds=as_measured(truth_gpu, "bf16", device), **{"pass": pass_}))
    for op in ("rmsnorm", "gelu"):
        for numel in (2**20, 2**23, 2**24, 2**25, 2**26, 2**27):
            nbytes = 4 * numel
            seconds = nbytes / (3.35e12 * TRUE["memory_efficiency"]) + TRUE["kernel_overhead_s"]
            rows.append(_row(op=op, kind="norm", shape=f"numel={numel}", numel=numel, bytes=nbytes, seconds=seconds))
    for b, h, s, d in ((1, 16, 1024, 128), (2, 32, 2048, 128), (1, 24, 4096, 128), (1, 32, 8192, 128), (4, 16, 2048, 64)):
        for pass_ in ("fwd", "bwd"):
            device = truth.attention_device_seconds(truth_gpu, dict(b=b, h=h, s=s, d=d), pass_, family)
            rows.append(_row(op="attention", kind="attention", shape=f"b={b},h={h},s={s},d={d}", numel=b * h * s * d,
                             seconds=as_measured(truth_gpu, "bf16", device), **{"pass": pass_}))
    for nbytes in (2**16, 2**20, 2**24, 2**28):
        for n in (2, 8):
            seconds = TRUE["latency"] + bus_factor("all_reduce", n) * nbytes / (TRUE["busbw"] * 1e9)
            rows.append(_row(op="all_reduce", kind="collective", shape=f"bytes={nbytes},n={n}", bytes=nbytes,
                             group_size=n, seconds=seconds, **{"pass": ""}))
    return pd.DataFrame(rows)


def test_fitting_a_generated_profile_recovers_its_constants():
    result = fit.fit_profile(synthetic_profile(), gpu_preset("h100-sxm"), "h100-again", {"device": "cuda"})
    got = {c.name: c.value for c in result.constants}
    assert got["gemm_efficiency_bf16"] == pytest.approx(TRUE["efficiency"], rel=0.01)
    assert got["gemm_k_overhead"] == pytest.approx(TRUE["overhead"], rel=0.05)
    assert got["memory_efficiency"] == pytest.approx(TRUE["memory_efficiency"], rel=1e-6)
    assert got["kernel_overhead_s"] == pytest.approx(TRUE["kernel_overhead_s"], rel=1e-6)
    assert got["all_reduce_busbw_GBps"] == pytest.approx(TRUE["busbw"], rel=1e-6)
    assert got["all_reduce_latency_s"] == pytest.approx(TRUE["latency"], rel=1e-6)
    for name, value in ATTENTION.items():
        assert got[f"attention_{name}"] == pytest.approx(value, rel=0.03), name
    assert all(c.cv_mape < 0.01 for c in result.constants if not c.name.startswith("attention"))
    assert result.record["gemm_burst_efficiency_16"] == pytest.approx(TRUE["efficiency"], rel=0.01)
    assert result.record["nvlink_ring_busbw"] == pytest.approx(TRUE["busbw"], rel=1e-6)


def test_cpu_profile_becomes_a_preset_that_simulates(tmp_path, monkeypatch):
    for suffix in (".csv", ".json"):
        shutil.copy(ROOT / "calibrate" / "profiles" / f"cpu-amd-epyc{suffix}", tmp_path / f"cpu{suffix}")
    run = subprocess.run([sys.executable, "-m", "calibrate", "--fit", "--profile", str(tmp_path / "cpu.csv")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "held out" in run.stdout and "gemm_efficiency_fp32" in run.stdout
    written = json.loads((tmp_path / "cpu.fit.json").read_text())
    constants = {c["name"]: c for c in written["constants"]}
    assert 0.02 < written["record"]["tf32_tflops"] < 0.5  # a 2-core CPU: tens of GFLOP/s
    assert constants["gemm_efficiency_fp32"]["cv_mape"] < 0.10
    monkeypatch.setitem(PRESETS, "cpu-fitted", None)  # removed again after the test
    register_preset(GpuSpec(**written["record"]))
    import sim3d
    result = sim3d.simulate(ROOT / "scenarios" / "tiny.yaml", **{"cluster.gpu": "cpu-fitted"})
    assert result.summary["step_time_s"] > 0


def test_calibrate_fit_on_an_existing_profile_prints_each_constant_with_its_held_out_error(tmp_path):
    from typer.testing import CliRunner

    from sim3d.cli.app import app
    root = Path(__file__).resolve().parents[1] / "calibrate" / "profiles"
    for suffix in (".csv", ".json"):
        shutil.copy(root / f"cpu-amd-epyc{suffix}", tmp_path / f"cpu{suffix}")
    done = CliRunner().invoke(app, ["calibrate", "--fit", "--profile", str(tmp_path / "cpu.csv"), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    names = {c["name"] for c in data["constants"]}
    assert {"gemm_efficiency_fp32", "all_reduce_busbw_GBps"} <= names
    assert all(c["cv_mape"] >= 0 and c["rows"] > 0 for c in data["constants"])
    assert Path(data["fit"]).is_file()
    refused = CliRunner().invoke(app, ["calibrate", "--profile", str(tmp_path / "cpu.csv")])
    assert refused.exit_code == 2 and "--fit" in refused.output


def test_a_fit_that_beats_the_datasheet_or_fits_nothing_is_refused(tmp_path):
    """calibrate --fit wrote a GEMM efficiency of 3,228% of the peak (a profile of another
    device), and on an empty profile a fit with no constants, exit 0."""
    source = ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv"
    table = pd.read_csv(source)
    fast = tmp_path / "fast.csv"
    table.assign(seconds=table["seconds"] / 100).to_csv(fast, index=False)
    shutil.copy(source.with_suffix(".json"), fast.with_suffix(".json"))
    with pytest.raises(ValueError, match="cannot beat its datasheet"):
        fit.fit_file(fast)
    empty = tmp_path / "empty.csv"
    table.head(0).to_csv(empty, index=False)
    shutil.copy(source.with_suffix(".json"), empty.with_suffix(".json"))
    with pytest.raises(ValueError, match="no rows to fit"):
        fit.fit_file(empty)
