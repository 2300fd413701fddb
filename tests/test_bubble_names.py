"""Each "bubble" a user reads says which one it is (issue 34 item 5): the summary's
bubble_fraction is the least busy rank's idle share of the step; the breakdown's pipeline
wait is the critical rank's time waiting for another stage."""

from rich.console import Console
from typer.testing import CliRunner

from sim3d.analysis.summary import breakdown_table, summary_table
from sim3d.cli.app import app

SUMMARY = {"name": "x", "num_gpus": 8, "tp": 1, "pp": 4, "dp": 2, "cp": 1, "ep": 1, "etp": 1, "vpp": 1,
           "schedule": "1f1b", "num_microbatches": 8, "micro_batch": 1, "step_time_s": 2.0, "tokens_per_s": 1.0,
           "model_tflops_per_gpu": 1.0, "mfu": 0.5, "hardware_tflops_per_gpu": 1.0, "hfu": 0.5,
           "bubble_fraction": 0.119, "comm_exposed_s": 0.1, "peak_memory_gib": 1.0, "fits_in_memory": True,
           "sim_events": 10, "sim_wall_s": 0.1, "breakdown": {"compute": 1.8, "pipeline_wait": 0.2}}


def _text(renderable) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_summary_and_breakdown_name_their_bubbles():
    summary = _text(summary_table(SUMMARY))
    assert "bubble (idle share of the least busy rank)" in summary and "11.9%" in summary
    assert "waiting for another stage (bubble on this rank)" in _text(breakdown_table(SUMMARY))


def test_schedule_command_names_its_bubble():
    result = CliRunner().invoke(app, ["schedule", "1f1b", "--pp", "4", "-m", "8"], catch_exceptions=False)
    assert "bubble: 27.3% (idle share of the least busy rank)" in result.stdout
