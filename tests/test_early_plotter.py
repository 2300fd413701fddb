"""The `sim3d` command starts `sim3d run`'s plotting process before its own imports (cli/entry.py)
when the command line asks for plots; the run takes that process, and one it does not take is
stopped: no command may leave a process behind or draw with a process it did not mean to start."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d.cli import entry, run_command
from sim3d.cli.app import app
from sim3d.report.beside import can_fork

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "scenarios" / "tiny.yaml")
forks = pytest.mark.skipif(not can_fork(), reason="the plotting process is forked on Linux only")


@pytest.mark.parametrize("args", [
    [],
    ["run"],
    ["plan", TINY],
    ["run", "no-such.yaml"],  # a mistyped path pays for no process
    ["run", str(ROOT)],  # a folder is no scenario
    ["run", TINY, "--no-plots"],
    ["run", TINY, "--help"],
    ["run", "--out", "x", TINY],  # not the peek's form: the run starts its process itself
])
def test_no_process_for_a_command_line_that_will_not_plot(args):
    assert entry.plotter_for(args) is None
    assert multiprocessing.active_children() == []


@forks
def test_a_run_with_plots_gets_its_process_at_once():
    plotter = entry.plotter_for(["run", TINY, "--out", "somewhere"])
    try:
        assert plotter is not None and plotter._process.is_alive()
    finally:
        plotter.close()
    assert multiprocessing.active_children() == []


@forks
def test_the_run_draws_with_the_process_started_for_it(tmp_path, monkeypatch):
    from sim3d.report import outputs
    started = entry.plotter_for(["run", TINY])
    monkeypatch.setattr(run_command, "STARTED_PLOTTER", started)
    monkeypatch.setattr(outputs, "start_plotting", lambda: pytest.fail("a second plotting process was started"))
    result = CliRunner().invoke(app, ["run", TINY, "--out", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert run_command.STARTED_PLOTTER is None  # taken
    assert all((tmp_path / name).stat().st_size > 0 for name in ("gantt.png", "memory.png", "links.png"))
    assert multiprocessing.active_children() == []


@forks
def test_a_run_without_plots_stops_the_process_started_for_it(tmp_path, monkeypatch):
    started = entry.plotter_for(["run", TINY])
    process = started._process
    monkeypatch.setattr(run_command, "STARTED_PLOTTER", started)
    # --no-plots after an option the peek does not read: the parser's word is the one that counts
    result = CliRunner().invoke(app, ["run", TINY, "--out", str(tmp_path), "--no-plots"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert not process.is_alive() and run_command.STARTED_PLOTTER is None
    assert not (tmp_path / "gantt.png").exists()


@pytest.mark.parametrize("args, status, files", [
    (["run", "scenarios/tiny.yaml"], 0, ["gantt.png", "memory.png", "links.png", "summary.json"]),
    (["run", "scenarios/tiny.yaml", "--trace", "xml"], 2, []),  # refused after the process started
    (["run", "scenarios/tiny.yaml", "--bogus"], 2, []),  # refused by the parser
])
def test_the_command_ends_with_its_plotting_process(tmp_path, args, status, files):
    """The real command, entry point and all: the outputs are there, and the plotting process
    has ended by the time the command's exit handlers run (multiprocessing's would stop it,
    and it would die with the command anyway; a command that left it to them forgot it)."""
    code = ("import atexit, multiprocessing, multiprocessing.util, sys\n"  # util's own handler, which
            # stops daemonic processes, is registered first and so runs after this one
            "atexit.register(lambda: print('children left:', len(multiprocessing.active_children())))\n"
            f"sys.argv = ['sim3d', *{[*args, '--out', str(tmp_path / 'out')]!r}]\n"
            "from sim3d.cli.entry import main\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr
    assert done.stdout.splitlines()[-1] == "children left: 0"
    assert all((tmp_path / "out" / name).stat().st_size > 0 for name in files)
