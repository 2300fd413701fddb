"""How much of a traced step the GPU ran anything (StepTruth.gpu_busy_share), and compare's
note where the host, not the GPU, set the pace (docs/calibration.md, "A step the host paces").
The hand-made two-rank trace's figure is counted by hand in tests/test_trace_profile.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs.kineto import read_trace
from sim3d.costs.trace_profile import step_truth

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "fixtures" / "traces"
H200 = TRACES / "h200_gpt_step.json.gz"


def test_a_host_running_ahead_leaves_no_idle_gpu():
    """A GPU-bound step whose host launched ahead: step #1's annotation (100-200 us) opens
    while step #0's kernels still run (0-250 us), and its own run 250-400 us. The GPU never
    waited, so both steps are all busy, whichever step launched the kernels running in them."""
    from sim3d.costs.kineto import Kernel, RankTrace, Step
    kernels = [Kernel(0, 7, "gemm", 0.0, 250.0, "gemm", "", "fwd", None, 5.0),
               Kernel(0, 7, "gemm", 250.0, 150.0, "gemm", "", "fwd", None, 150.0)]
    trace = RankTrace("made", "", 0, 1, "H100", None, None, kernels, {},
                      [Step("ProfilerStep#0", 0.0, 100.0), Step("ProfilerStep#1", 100.0, 100.0)])
    truth = step_truth([trace])
    assert truth.step_s == pytest.approx((250e-6, 300e-6))  # each to its last kernel's end
    assert truth.gpu_busy_share == pytest.approx(1.0)
    assert truth.gpu_busy_s == pytest.approx(200e-6)  # windows 0-250 and 250-400 us: no kernel counted twice


def test_compare_says_when_the_traced_gpu_waited_on_its_host(tmp_path):
    """The real 2-layer GPT trace (batch 4 x 1024 tokens on an H200) keeps its GPU busy for
    3.1 ms of a 10.2 ms step: Python and kernel launches set its pace, which sim3d does not
    price, so compare says so; the eager Llama step (GPU busy 99%) gets no such note."""
    import json as json_
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    host_paced = step_truth([read_trace(H200)])
    assert host_paced.gpu_busy_share == pytest.approx(0.30, abs=0.05)
    gpu_paced = step_truth([read_trace(TRACES / "llama_eager_step.json.gz")])
    assert gpu_paced.gpu_busy_share > 0.95
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(ROOT / "scenarios" / "tiny.yaml"), "--out", str(tmp_path / "sim"),
                               "--no-plots"]).exit_code == 0
    noted = runner.invoke(app, ["compare", str(tmp_path / "sim"), str(H200)])
    assert noted.exit_code == 0, noted.output
    assert "ran nothing for 70% of the step" in noted.output and "host" in noted.output
    quiet = runner.invoke(app, ["compare", str(tmp_path / "sim"), str(TRACES / "llama_eager_step.json.gz")])
    assert quiet.exit_code == 0 and "ran nothing for" not in quiet.output
    assert "traced GPU busy 98.8% of the step" in quiet.output
    # a pipeline whose simulated bubble is most of that idle time: the schedule, not the host
    summary = json_.loads((tmp_path / "sim" / "summary.json").read_text())
    (tmp_path / "piped").mkdir()
    (tmp_path / "piped" / "summary.json").write_text(json_.dumps({**summary, "bubble_fraction": 0.65}))
    piped = runner.invoke(app, ["compare", str(tmp_path / "piped" / "summary.json"), str(H200)])
    assert piped.exit_code == 0 and "ran nothing for" not in piped.output
    as_json = json_.loads(runner.invoke(app, ["compare", str(tmp_path / "sim"), str(H200), "--json"]).stdout)
    assert as_json["traced_gpu_idle_share"] == pytest.approx(1 - as_json["traced"]["gpu_busy_share"])


def test_the_simulated_idle_is_the_busiest_ranks(tmp_path):
    """Rank 0 runs 0-1 and 1.5-2 s (overlapping rows once), rank 1 0-3 s of a 3-s step: the
    busiest rank never waits; alone, rank 0 would have waited 2 of 3 s."""
    from sim3d.cli.trace_commands import _simulated_idle
    trace = tmp_path / "trace.csv"
    trace.write_text("rank,start_s,end_s\n0,0,1\n0,0.5,1\n0,1.5,2\n1,0,3\n")
    assert _simulated_idle(trace, {}) == pytest.approx(0.0)
    trace.write_text("rank,start_s,end_s\n0,0,1\n0,0.5,1\n0,1.5,2\n1,2.9,3\n")
    assert _simulated_idle(trace, {}) == pytest.approx(1 - 1.5 / 3)
    assert _simulated_idle(tmp_path / "none.csv", {"bubble_fraction": 0.2}) == 0.2  # no trace: the summary's
