"""Where the wall time of `sim3d run scenarios/gpt3.yaml` goes, process by process: a
timestamped run of the real command, with marks where the plotting process is forked,
where it has its imports, and where each plot starts and ends; and where the caller starts
writing its outputs and starts waiting for the plots.

    python benchmarks/run_timeline.py [scenario and `sim3d run` options] > /dev/null

Times are seconds from this process's start (the interpreter's own start-up, about 0.02 s,
is not in them). The marks wrap functions of sim3d.report.beside and sim3d.report.outputs
before the command runs, so the run is otherwise the one a user gets, but for the outputs'
import (0.02 s), which comes before the plotting process's start here. Do not run it beside
the test suite: this machine has two cores.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time

T0 = time.perf_counter()


def mark(what: str) -> None:
    print(f"{time.perf_counter() - T0:6.3f} s  {'plots ' if os.getpid() != CALLER else 'caller'}  {what}",
          file=sys.stderr, flush=True)


CALLER = os.getpid()


def instrument() -> None:
    from sim3d.report import beside, outputs
    for name in ("draw_memory", "draw_memory_unwritten", "write_drawn", "draw_gantt", "draw_links"):
        def timed(*args, _draw=getattr(outputs, name), _name=name):
            mark(f"{_name} starts")
            _draw(*args)
            mark(f"{_name} ends")
        timed.__qualname__, timed.__module__ = name, outputs.__name__  # pickled by name
        setattr(outputs, name, timed)

    def import_module(module, _import=importlib.import_module):
        done = _import(module)
        mark(f"imported {module}")
        return done
    beside.importlib = type(sys)("importlib_marked")
    beside.importlib.import_module = import_module

    start, wait, write = beside.Beside.__init__, beside.Beside.wait, outputs.write_run_outputs

    def started(self, *args, **kwargs):
        mark("forks the plotting process")
        start(self, *args, **kwargs)

    def waited(self):
        mark("waits for the plots")
        wait(self)

    def written(*args, **kwargs):
        mark("starts writing outputs")
        paths = write(*args, **kwargs)
        mark("outputs written")
        return paths
    beside.Beside.__init__, beside.Beside.wait, outputs.write_run_outputs = started, waited, written


def main() -> None:
    instrument()
    with tempfile.TemporaryDirectory() as out:
        args = ["run", *(sys.argv[1:] or ["scenarios/gpt3.yaml"]), "--out", out]
        from sim3d.cli import entry
        plotter = entry.plotter_for(args)  # as the `sim3d` command's entry point does
        from sim3d.cli import app, run_command
        run_command.PROCESS_ENDS_WITH_COMMAND = True  # as the `sim3d` command's own process
        run_command.STARTED_PLOTTER = plotter
        mark("sim3d's CLI imported")
        try:
            app.app(args, standalone_mode=False)
        finally:
            mark("command done")


if __name__ == "__main__":
    main()
