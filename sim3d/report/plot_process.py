"""The process that draws `sim3d run`'s plots, and what it imports: kept apart from the
outputs' own imports so that the command's entry point can start it before anything else
(sim3d.cli.entry)."""

from __future__ import annotations

from .beside import Beside

# no pandas: the plots read numpy columns, and the plotting process is on the critical path
PLOT_MODULES = ("sim3d.report.gantt", "sim3d.report.memory_plot", "sim3d.report.links_plot")


def start_plotting() -> Beside:
    """The process that will draw the plots, started now so that matplotlib's import (half a
    second) overlaps the simulator's import and the simulation; pass it to `write_run_outputs`.
    numpy is imported first: both processes need it, and the process inherits it for free."""
    import numpy  # noqa: F401
    return Beside(preload=PLOT_MODULES)
