"""The `sim3d` command's entry point ([project.scripts], `python -m sim3d`). A run that will
draw plots gets its plotting process here, before the command-line parser and the simulator
are imported: matplotlib's import (half a second) then starts a tenth of a second sooner,
and the plotting process, not the simulation, bounded the flagship's wall time
(benchmarks/run_timeline.py). The command line is only peeked at: `run`, an existing
scenario file, no `--no-plots` or `--help`. Whatever the parser then decides is what
happens: `sim3d run` takes the process (run_command.STARTED_PLOTTER) or, when it draws
nothing after all (bad input, an option the peek did not see), the process is stopped."""

from __future__ import annotations

import os
import sys


def main() -> None:  # pragma: no cover - console entry point (tests call `plotter_for`)
    open_closed_streams()
    plotter = plotter_for(sys.argv[1:])
    from .app import main as run_command_line
    run_command_line(plotter)


def open_closed_streams() -> None:
    """A standard stream the caller closed (`>&-`, `2>&-`) is None in Python, and the first
    print would fail: what would have gone there goes nowhere, as with other Unix tools, and
    the command still writes its files and exits as it would."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))


def plotter_for(args: list[str]):
    """The plotting process for a command line that will plot (`start_plotting()`), or None."""
    if len(args) < 2 or args[0] != "run" or not os.path.isfile(args[1]):
        return None
    if any(arg in ("--no-plots", "--help") for arg in args[2:]):
        return None
    from ..report.plot_process import start_plotting
    return start_plotting()
