"""The `sim3d` command: parse, call the library, print. Exit codes: 0 ok, 2 bad input, 3 the
environment failed (a full disk), 1 bug (support.py). Each command lives in the module named
below; this one only assembles them."""

from __future__ import annotations

import typer

from . import run_command
from .check_commands import schedule, validate
from .goodput_command import goodput
from .imports import import_app
from .kernel_command import kernel
from .reality_commands import calibrate, compare, execute
from .study_command import study
from .plan_sweep_commands import plan, sweep
from .support import guarded

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate 3D-parallel LLM training steps (see README.md).")
for command in (run_command.run, validate, schedule, plan, sweep, goodput, study, execute, compare, calibrate,
                kernel):
    app.command(name=command.__name__)(guarded(command))


def _version(value: bool) -> None:
    if value:
        from .. import __version__
        print(f"sim3d {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """Simulate 3D-parallel LLM training steps (see README.md)."""


app.add_typer(import_app, name="import")


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(plotter=None) -> None:  # pragma: no cover - console entry point
    """The `sim3d` command, whose process (unlike a test runner's) ends with it: `_run` may gc.freeze,
    and the process ends without tearing the interpreter down (`exit_now`).
    SIGTERM (a job scheduler, `kill`) unwinds like an exception, so a half-written output's
    temporary file is removed and the folder's lock released on the way out (exit 143).
    `plotter`: the plotting process the entry point started for `sim3d run` (entry.py); one
    the run did not take is stopped."""
    import signal
    import sys
    from ..util.reader_gone import ReaderMayLeave
    signal.signal(signal.SIGTERM, _terminated)
    sys.stdout = ReaderMayLeave(sys.stdout)  # `| head` ends the reading, not the command's work
    run_command.PROCESS_ENDS_WITH_COMMAND = True
    run_command.STARTED_PLOTTER = plotter
    try:
        try:
            app()
        finally:
            if plotter is not None:
                plotter.close()
    except SystemExit as done:
        exit_now(done.code)
    exit_now(0)


def exit_now(code) -> None:
    """End the process as `sys.exit(code)` would, less the interpreter's teardown, which frees a
    finished run's objects one by one (0.1 s of the flagship's 1.7, benchmarks/run_wall.py):
    the exit handlers still run and the standard streams are flushed. Every file sim3d writes is
    closed by then (util/safe_files.py, raw descriptors elsewhere)."""
    import atexit
    import os
    import sys
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (`| head`): Python's own status
            code = code or 120
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
