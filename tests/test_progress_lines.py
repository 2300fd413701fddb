"""Long work shows progress in a log or a pipe too, not only on a terminal."""

import io

from rich.console import Console
from typer.testing import CliRunner

from sim3d.cli import progress as progress_module
from sim3d.cli.app import app
from sim3d.cli.progress import LineProgress, progress_bars


def test_a_log_gets_plain_lines_while_the_work_runs():
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False, width=200)
    with progress_bars("plan", console) as bars:
        assert isinstance(bars, LineProgress)
        bars.interval = 0.0
        task = bars.add_task("estimating layouts", total=4, rate="")
        for done in range(4):
            bars.update(task, advance=1, rate=f"{done + 1}/s")
            assert f"estimating layouts: {done + 1}/4" in sink.getvalue()  # printed before the work ends
    lines = sink.getvalue().splitlines()
    assert lines[0].startswith("estimating layouts: 0/4 (0%)") and "4/4 (100%) 4/s" in lines[-1]
    assert all("\x1b" not in line for line in lines)  # no terminal escapes in a log


def test_plan_into_a_pipe_prints_its_phases_as_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)
    result = CliRunner().invoke(app, ["plan", "scenarios/tiny.yaml", "--gpus", "8", "--workers", "1",
                                      "--out", str(tmp_path / "plan"), "--no-plots"])
    assert result.exit_code == 0, result.output
    phases = [line for line in result.stderr.splitlines() if line.startswith(("estimating layouts:", "simulating"))]
    assert len(phases) >= 3 and phases[-1].endswith(" s")


def test_a_table_piped_into_a_file_keeps_every_column_whole():
    from rich.table import Table

    from sim3d.cli.support import print_whole
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False, width=120)
    table = Table()
    for name in ("layout", "schedule", "step s", "MFU", "GiB", "vs yours"):
        table.add_column(name, no_wrap=True)
    table.add_row("tp4 pp2 dp4 cp2 vpp20 mb1 " * 3, "interleaved-1f1b", "14.51", "54.9%", "71.2", "+3.0%")
    print_whole(console, table)
    text = sink.getvalue()
    assert "…" not in text and "interleaved-1f1b" in text and "vs yours" in text and "+3.0%" in text


def test_status_messages_off_a_terminal_are_lines_at_most_every_interval_and_the_last():
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False, width=200)
    with progress_module.status_messages("calibrating ...", console) as status:
        status.interval = 3600.0  # nothing between the first and the last
        for n in range(5):
            status.update(f"kernel {n} of 5")
    assert sink.getvalue().splitlines() == ["calibrating ...", "kernel 4 of 5"]
    sink = io.StringIO()
    with progress_module.StatusLines(Console(file=sink, force_terminal=False), "start", interval=0.0) as status:
        status.update("one")
        status.update("two")
    assert sink.getvalue().splitlines() == ["start", "one", "two"]


def test_execute_into_a_pipe_says_what_it_is_doing(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)
    result = CliRunner().invoke(app, ["execute", "scenarios/tiny.yaml", "--set", "parallel.pp=2", "--steps", "2",
                                      "--out", str(tmp_path / "exec")])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[:2] == ["executing tiny on 2 process(es) ...", "started 2 rank process(es) (gloo); each imports "
                         "torch first"]
    assert "step 1 of 2 done on rank 0" in lines and "step 2 of 2 done on rank 0" in lines
