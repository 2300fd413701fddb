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
