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


def main() -> None:  # pragma: no cover - console entry point
    """The `sim3d` command, whose process (unlike a test runner's) ends with it: `_run` may gc.freeze.
    SIGTERM (a job scheduler, `kill`) unwinds like an exception, so a half-written output's
    temporary file is removed and the folder's lock released on the way out (exit 143)."""
    import signal
    signal.signal(signal.SIGTERM, _terminated)
    run_command.PROCESS_ENDS_WITH_COMMAND = True
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
