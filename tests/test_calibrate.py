"""Calibration harness (schema, provenance) and the profile reader (interpolation, errors).

No timing is asserted: measurements on shared CI machines are noise."""
from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim3d.costs.collectives import bus_factor
from sim3d.costs.profile import COLUMNS, Profile, ProfileError

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "calibrate" / "profiles").glob("*.csv"))
PROV_KEYS = {"device", "device_name", "torch", "cuda", "nccl", "cpu_count", "threads", "date",
             "hostname", "command", "quick"}


def _check_files(csv_path: Path) -> Profile:
    with open(csv_path, newline="") as f:
        header = next(csv.reader(f))
    assert header == COLUMNS
    prov = json.loads(csv_path.with_suffix(".json").read_text())
    assert PROV_KEYS <= set(prov)
    prof = Profile.load(csv_path)
    t = prof.table
    assert (t["seconds"] > 0).all()
    coll = t[t["kind"] == "collective"]
    # bus bandwidth follows the nccl-tests definition
    algbw = coll["bytes"] / coll["seconds"] / 1e9
    factor = [bus_factor(op, int(n)) for op, n in zip(coll["op"], coll["group_size"])]
    assert np.allclose(coll["gbps"], algbw * factor, rtol=1e-3)
    gemm = t[t["kind"] == "gemm"]
    flops = gemm["m"] * gemm["n"] * gemm["k"] * np.where(gemm["pass"] == "fwd", 2, 4)
    assert np.allclose(gemm["tflops"], flops / gemm["seconds"] / 1e12, rtol=1e-3)
    assert prof.describe("compute").startswith("profile ")
    return prof


@pytest.mark.parametrize("path", PROFILES, ids=[p.name for p in PROFILES])
def test_committed_profile_schema(path):
    prof = _check_files(path)
    kinds = set(prof.table["kind"])
    # a single-GPU profile has no group to measure collectives on (run with --no-collectives)
    measured_collectives = "collectives" in json.loads(path.with_suffix(".json").read_text())
    assert {"gemm", "attention", "norm", "elementwise"} | ({"collective"} if measured_collectives else set()) <= kinds
    assert set(prof.table.loc[prof.table.kind != "collective", "pass"]) == {"fwd", "bwd"}


def test_tiny_calibration_in_process(tmp_path):
    pytest.importorskip("torch")
    from sim3d_calibrate import run_calibration
    from sim3d_calibrate.shapes import KernelPlan
    plan = KernelPlan(gemms=[("gemm", 32, 48, 64), ("gemm", 64, 64, 64)], attention=[(1, 2, 2, 32, 16)],
                      rowwise=[(16, 32)], softmax=[(16, 32)], embedding=[(16, 64, 32)], cross_entropy=[(16, 64)])
    msgs = []
    out = run_calibration("cpu", quick=True, out=str(tmp_path / "tiny.csv"), progress=msgs.append,
                          plan=plan, sizes=[1024, 8192], group_sizes=[2],
                          collective_ops=("all_reduce", "all_gather", "send_recv"))
    assert out == tmp_path / "tiny.csv" and msgs
    prof = _check_files(out)
    t = prof.table
    assert set(t.loc[t.kind == "collective", "op"]) == {"all_reduce", "all_gather", "send_recv"}
    assert len(t[t.op == "gemm"]) == 4      # 2 shapes x fwd/bwd
    for op in ("layernorm", "rmsnorm", "gelu", "swiglu", "dropout", "softmax", "embedding", "cross_entropy"):
        assert set(t.loc[t.op == op, "pass"]) == {"fwd", "bwd"}, op
    assert set(t.loc[t.op == "add", "pass"]) == {"fwd"}
    assert prof.gemm_seconds(32, 48, 64, "fp32") == pytest.approx(
        t[(t.op == "gemm") & (t.m == 32) & (t["pass"] == "fwd")]["seconds"].iloc[0])
    prov = json.loads(out.with_suffix(".json").read_text())
    assert prov["quick"] is True and prov["device"] == "cpu" and prov["dtype"] == "fp32"
    assert prov["collectives"]["backend"] == "gloo"


# ----------------------------------------------------------------------- synthetic profiles
def _row(**kw):
    return {c: kw.get(c, "") for c in COLUMNS}


def _synthetic() -> Profile:
    rows = []
    for m, n, k, sec in [(128, 128, 128, 1e-4), (1024, 1024, 1024, 1e-2), (1024, 4096, 1024, 3e-2), (4096, 4096, 4096, 1.0)]:
        for p, f in (("fwd", 1), ("bwd", 2)):
            rows.append(_row(op="gemm", kind="gemm", **{"pass": p}, m=m, n=n, k=k, numel=m * n, dtype="fp32",
                             device="cpu", seconds=sec * f, tflops=2 * f * m * n * k / (sec * f) / 1e12))
    for numel, sec in [(1e3, 1e-5), (1e5, 2e-5), (1e7, 1e-3)]:
        for op, kind in (("gelu", "elementwise"), ("layernorm", "norm")):
            rows.append(_row(op=op, kind=kind, **{"pass": "fwd"}, numel=int(numel), dtype="fp32", device="cpu", seconds=sec))
    for g, scale in ((2, 1.0), (4, 1.5)):
        for nbytes, sec in [(1024, 5e-5), (1 << 20, 1e-3), (16 << 20, 1e-2)]:
            rows.append(_row(op="all_reduce", kind="collective", bytes=nbytes, group_size=g, device="cpu",
                             dtype="fp32", seconds=sec * scale,
                             gbps=nbytes / (sec * scale) / 1e9 * bus_factor("all_reduce", g)))
    prov = {"device_name": "Test CPU", "torch": "2.13.0", "date": "2026-01-02T03:04:05+00:00"}
    return Profile(pd.DataFrame(rows), path="calibrate/profiles/test.csv", provenance=prov)


def test_gemm_exact_and_interpolated():
    p = _synthetic()
    assert p.gemm_seconds(1024, 1024, 1024, "fp32") == pytest.approx(1e-2)
    assert p.gemm_seconds(1024, 4096, 1024, "float32", "bwd") == pytest.approx(6e-2)
    mid = p.gemm_seconds(2048, 2048, 2048, "fp32")
    rates = [2 * 1024**3 / 1e-2, 2 * 4096**3 / 1.0]
    assert 2 * 2048**3 / max(rates) * 0.5 < mid < 2 * 2048**3 / min(rates) * 2
    assert p.gemm_seconds(1024, 1024, 1024, "bf16") is None          # no bf16 GEMMs
    assert p.extrapolated["gemm"] == 0
    p.gemm_seconds(16384, 16384, 16384, "fp32")
    assert p.extrapolated["gemm"] == 1
    assert "beyond the measured range" in p.describe("compute")


def test_op_seconds_exact_monotone_and_none():
    p = _synthetic()
    assert p.op_seconds("gelu", 100000, "fp32") == pytest.approx(2e-5)
    assert p.op_seconds("layer_norm", 1000, "fp32") == pytest.approx(1e-5)
    xs = np.geomspace(1e3, 1e7, 50)
    ys = [p.op_seconds("gelu", x, "fp32") for x in xs]
    assert all(a <= b * (1 + 1e-12) for a, b in zip(ys, ys[1:]))
    assert p.op_seconds("gelu", 10, "fp32") == pytest.approx(1e-5)              # latency floor
    assert p.op_seconds("gelu", 1e8, "fp32") == pytest.approx(1e-2)              # throughput of the edge
    assert p.op_seconds("softmax", 1000, "fp32") is None                         # not measured
    assert p.op_seconds("gelu", 1000, "fp32", "bwd") is None                     # no bwd rows
    assert p.op_seconds("gelu", 1000, "bf16") is None
    assert p.op_seconds("norm", 1e5, "fp32") == pytest.approx(2e-5)             # a kind pools its ops
    assert p.attention_seconds(1, 8, 128, 64, "fp32") is None


def test_collective_exact_monotone_and_group_scaling():
    p = _synthetic()
    assert p.collective_seconds("all_reduce", 1 << 20, 2) == pytest.approx(1e-3)
    assert p.collective_seconds("all-reduce", 1 << 20, 4) == pytest.approx(1.5e-3)
    xs = np.geomspace(1024, 16 << 20, 60)
    ys = [p.collective_seconds("all_reduce", x, 2) for x in xs]
    assert all(a <= b * (1 + 1e-12) for a, b in zip(ys, ys[1:]))
    assert p.extrapolated["collective"] == 0
    # below the range: latency floor; above: bus bandwidth of the largest size
    assert p.collective_seconds("all_reduce", 10, 2) == pytest.approx(5e-5)
    assert p.collective_seconds("all_reduce", 64 << 20, 2) == pytest.approx(4e-2)
    # group 8 uses the nearest measured group (4) and the nccl-tests factor ratio
    t8 = p.collective_seconds("all_reduce", 1 << 20, 8)
    assert t8 == pytest.approx(1.5e-3 * bus_factor("all_reduce", 8) / bus_factor("all_reduce", 4))
    assert p.collective_seconds("all_reduce", 1 << 20, 1) == 0.0
    assert p.collective_seconds("all_gather", 1 << 20, 2) is None
    assert "beyond the measured range" in p.describe("collective")


def test_describe_names_source():
    d = _synthetic().describe("compute")
    assert d == "profile calibrate/profiles/test.csv (Test CPU, torch 2.13.0, 2026-01-02)"


def test_load_errors(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        Profile.load(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("op,kind,seconds\ngemm,gemm,1\n")
    with pytest.raises(ProfileError, match=r"missing column.*'pass'"):
        Profile.load(bad)
    wrong_kind = tmp_path / "kind.csv"
    pd.DataFrame([_row(op="x", kind="banana", **{"pass": "fwd"}, numel=1, dtype="fp32", seconds=1)]).to_csv(wrong_kind, index=False)
    with pytest.raises(ProfileError, match="kind must be one of"):
        Profile.load(wrong_kind)
    neg = tmp_path / "neg.csv"
    pd.DataFrame([_row(op="gelu", kind="elementwise", **{"pass": "fwd"}, numel=1, dtype="fp32", seconds=-1)]).to_csv(neg, index=False)
    with pytest.raises(ProfileError, match="neg.csv.*seconds must be a positive"):
        Profile.load(neg)


def test_profile_reader_does_not_import_torch():
    code = "import sys, sim3d, sim3d.costs.profile, calibrate; assert 'torch' not in sys.modules, 'torch imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_math_helpers():
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("send_recv", 2) == 1.0
    assert math.isclose(bus_factor("all_to_all", 8), 7 / 8)


def test_attention_lookup_reads_the_default_dispatch_rows_only(tmp_path):
    """``attention.<backend>`` rows (one SDPA backend forced) are kept beside the default
    ``attention`` rows but never pooled with them."""
    import pandas as pd
    rows = []
    for op, seconds in (("attention", 1e-3), ("attention.flash", 5e-3)):
        for pass_, f in (("fwd", 1.0), ("bwd", 2.5)):
            flops = 2 * 32 * 4096 * 4096 * 128 * f
            rows.append(dict(op=op, kind="attention", **{"pass": pass_}, shape="b=1,h=32,s=4096,d=128", m="", n="",
                             k="", numel=32 * 4096 * 128, bytes="", group_size="", dtype="bf16", device="cuda",
                             seconds=seconds * f, tflops=flops / (seconds * f) / 1e12, gbps=""))
    path = tmp_path / "a.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    prof = Profile.load(path)
    assert prof.attention_seconds(1, 32, 4096, 128, "bf16", "fwd") == pytest.approx(1e-3)
    assert prof.attention_seconds(1, 32, 4096, 128, "bf16", "bwd") == pytest.approx(2.5e-3)


def test_round_spread_and_stability_verdict():
    from sim3d_calibrate.noise import noise_summary, stability
    rows = [{"op": op, "pass": "fwd", "shape": "s", "dtype": "fp32", "seconds": t}
            for op, times in (("quiet", (1.0, 1.02)), ("noisy", (1.0, 1.5))) for t in times]
    noise = noise_summary(rows)
    assert noise["kernels"] == 2 and noise["median_round_spread"] == pytest.approx(0.26)
    assert noise["worst"][-1]["op"] == "noisy" and noise["worst"][-1]["spread"] == pytest.approx(0.5)
    assert any("did not repeat" in r for r in stability(noise, [0.1, 0.1, 0.1], [0.1, 0.1, 0.1], cores=2))
    quiet = noise_summary(rows[:2])
    assert stability(quiet, [0.1, 0.1, 0.1], [0.2, 0.1, 0.1], cores=2) == []
    assert any("load average 3.0 on 2 cores at the start" in r for r in stability(quiet, [3.0, 2, 1], None, cores=2))


def test_a_busy_calibration_is_flagged_in_provenance_and_in_every_prediction(tmp_path, monkeypatch):
    import json
    import sim3d
    from sim3d_calibrate import run_calibration
    from sim3d_calibrate.shapes import KernelPlan
    monkeypatch.setattr("os.getloadavg", lambda: (64.0, 64.0, 64.0))  # as if 64 processes competed
    plan = KernelPlan(gemms=[("qkv", 64, 64, 64)], attention=[], rowwise=[], softmax=[], embedding=[],
                      cross_entropy=[])
    out = run_calibration("cpu", quick=True, out=str(tmp_path / "busy.csv"), plan=plan, collectives=False)
    provenance = json.loads(out.with_suffix(".json").read_text())
    assert any("load average 64.0" in r for r in provenance["unstable"])
    assert "p90_round_spread" in provenance["kernels"]["noise"]
    result = sim3d.simulate(ROOT / "scenarios" / "tiny.yaml", **{"costs.profile": str(out)})
    assert any("flagged unstable" in w for w in result.summary["warnings"])
    assert any("FLAGGED UNSTABLE" in source for _, source in result.explain())


def test_the_calibrations_own_threads_are_not_counted_as_competition():
    from sim3d_calibrate.noise import stability
    quiet = {"p90_round_spread": 0.05}
    assert stability(quiet, [0.2, 0.2, 0.2], [2.1, 1.0, 0.5], cores=2, own_threads=2) == []
    assert stability(quiet, [0.2, 0.2, 0.2], [3.5, 1.0, 0.5], cores=2, own_threads=2)


def test_the_package_list_installs_every_package_and_the_harness_under_its_own_name():
    """pyproject.toml lists packages by hand (the harness folder calibrate/ installs as
    sim3d_calibrate, so it cannot collide with another `calibrate`): a new subpackage must be
    listed there, or an installed sim3d would miss it."""
    import tomllib
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(root).parts) for p in (root / "sim3d").rglob("__init__.py")}
    assert set(config["packages"]) == folders | {"sim3d_calibrate"}
    assert config["package-dir"] == {"sim3d_calibrate": "calibrate"}


def test_a_calibration_without_out_never_writes_into_the_package(tmp_path, monkeypatch):
    """Second hostile pass: the default path was calibrate/profiles/<device>.csv inside the
    package, the committed profile the README's examples use, overwritten in place."""
    from sim3d_calibrate.profile_io import PROFILES_DIR, default_path
    monkeypatch.chdir(tmp_path)
    path = default_path("cpu")
    assert path.parent == tmp_path / "profiles" and PROFILES_DIR not in path.parents
