"""What every `sim3d` command shares: the consoles, one-line messages, exit codes, JSON output
and checked output paths (cli.py and cli_import.py both use them).

Exit codes (the README's table): 0 success; 1 a bug of sim3d's; 2 bad input, which the user
fixes by changing the command or its files (found before any work where it can be); 3 the
environment failed work the input allowed (a full disk, a quota, an I/O error): an OSError
that reaches the command, which names its file.
"""

from __future__ import annotations

import json
import math
import os
import sys
from functools import wraps
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text


# markup=False: every message is literal text; a `[/...]` in a gloo error or `[default]` in a
# pip hint must print as written, so styling is applied through Text spans, never markup.
out = Console(width=None if sys.stdout.isatty() else 120, markup=False, soft_wrap=True)  # tables fit logs; lines never split
err = Console(stderr=True, soft_wrap=True, markup=False)  # messages stay one line each, greppable

SET_HELP = ("Override a scenario value, e.g. --set parallel.tp=4 (repeatable); straggler.rank and "
            "straggler.slowdown set the scenario's one slow GPU (docs/what-if.md).")


def distinct_sets(values: list[str]) -> list[str]:
    """The `--set` option's check: a key given twice with different values is refused, where
    the last would silently win (a key given twice alike, or in two spellings alike, passes)."""
    from ..errors import ScenarioError
    from ..scenario.load import canonical_key, parse_override
    seen: dict[str, tuple[str, object]] = {}
    for text in values or []:
        try:
            key, value = parse_override(text)
        except ScenarioError:
            continue  # loading the scenario names what is wrong with it
        key = canonical_key(key)
        if key in seen and seen[key][1] != value:
            raise typer.BadParameter(f"{key} is set twice ({seen[key][0]!r}, then {text!r}); give it once")
        seen[key] = (text, value)
    return values


def print_whole(console: Console, renderable) -> None:
    """A table printed with every column whole: on a terminal as wide as the terminal; piped
    into a file or a pager (where `out` is 120 wide to suit logs) as wide as it needs, since
    rich caps a print's width at its console's."""
    if console.is_terminal:
        console.print(renderable)
        return
    from rich.measure import Measurement
    wide = Console(file=console.file, width=1000, markup=False, soft_wrap=True, color_system=None)
    wide.print(renderable, width=max(console.width, Measurement.get(wide, wide.options, renderable).maximum))


def say(label: str, message: object, style: str = "bold red") -> None:
    """One line on stderr: a styled label, then the message exactly as written."""
    err.print(Text.assemble((label, style), " ", str(message)), highlight=False)


class BadInput(Exception):
    """A user error found outside scenario loading (bad flag combination, missing file)."""


def _bad_input_types():
    from ..scenario.limits import WorkLimitExceeded
    from ..errors import ScenarioError
    from ..schedule import MalformedSchedule, ScheduleConstraint, ScheduleError
    from ..util.safe_files import UnsafeOutput
    return (ScenarioError, BadInput, ScheduleConstraint, ScheduleError, MalformedSchedule, WorkLimitExceeded,
            UnsafeOutput)


EXIT_BUG, EXIT_BAD_INPUT, EXIT_ENVIRONMENT = 1, 2, 3


def environment_message(e: OSError) -> str:
    """The file first: a full disk's `write` says only "[Errno 28] No space left on device"."""
    import errno
    what = e.strerror or str(e) or type(e).__name__
    code = f" ({errno.errorcode.get(e.errno, e.errno)})" if isinstance(e.errno, int) else ""
    if e.filename is None:
        return f"{what}{code}"
    return f"{e.filename}{' -> ' + str(e.filename2) if e.filename2 else ''}: {what}{code}"


def guarded(fn):
    """Readable messages instead of tracebacks: exit 2 for bad input, 3 for the environment
    failing (OSError), 1 for our own bugs."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, SystemExit, KeyboardInterrupt):
            # SIGTERM's exit (app.main) may land inside an import: the clauses below import,
            # and a half-imported module would turn the exit into an internal error
            raise
        except _bad_input_types() as e:
            say("error:", e)
            raise typer.Exit(EXIT_BAD_INPUT)
        except OSError as e:
            say("error:", environment_message(e))
            raise typer.Exit(EXIT_ENVIRONMENT)
        except Exception as e:  # noqa: BLE001 - last line of defence for users
            if isinstance(e, ModuleNotFoundError) and e.name == "torch":
                say("error:", "this command runs torch, which is not installed: pip install 'sim3d[executor]' "
                    "(the simulator itself does not need it)")
                raise typer.Exit(EXIT_BAD_INPUT)
            if os.environ.get("SIM3D_DEBUG"):
                raise
            say("internal error:", f"{type(e).__name__}: {e}\n"
                "(set SIM3D_DEBUG=1 for the traceback, and please report it)")
            raise typer.Exit(EXIT_BUG)
    return wrapper


JSON_HELP = "Print only JSON on stdout (messages stay on stderr)."


def _print_json(data) -> None:
    print(json.dumps(data, indent=2, allow_nan=False))


def _load(path: Path, sets: list[str]):
    from ..scenario.load import load_scenario
    return load_scenario(path, sets)


def _default_folder(name: str, suffix: str = "") -> Path:
    """reports/<name><suffix>, the name reduced to one safe path component: a scenario named
    `../../x` or `/etc` still writes under reports/."""
    from ..report.outputs import folder_name
    return Path("reports") / (folder_name(name) + suffix)


def _writable_folder(folder: Path, option: str = "--out", cwd_ok: bool = False) -> Path:
    """Create `folder` (before any work, so nothing computed is lost to a bad path)."""
    if not cwd_ok and (not str(folder).strip() or str(folder) == "."):
        raise BadInput(f"{option} {str(folder)!r}: name a folder (an empty path would write into the working "
                       "directory)")
    resolved, cwd = folder.resolve(), Path.cwd().resolve()
    where = ("the filesystem root" if resolved == Path(resolved.anchor) else
             "the working directory" if resolved == cwd else
             "the home folder" if resolved == Path.home().resolve() else
             "a folder that holds the working directory" if resolved in cwd.parents else None)
    if not cwd_ok and where:
        raise BadInput(f"{option} {folder}: is {where}; name a folder of the outputs' own (they would land "
                       "beside other files)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise BadInput(f"{option} {folder}: exists and is not a folder") from None
    except OSError as e:
        raise BadInput(f"{option} {folder}: cannot be created ({e.strerror})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{option} {folder}: not writable")
    return folder


def _writable_file(path: Path, option: str, suffixes: tuple[str, ...] = ()) -> Path:
    if suffixes and path.suffix.lower() not in suffixes:
        raise BadInput(f"{option} {path}: expected a file ending in {', '.join(suffixes)}")
    if path.is_dir():
        raise BadInput(f"{option} {path}: is a folder, expected a file")
    _writable_folder(path.parent, option, cwd_ok=True)  # x.csv in the working directory is fine
    return path


MIN_GANTT_WINDOW_S = 1e-5


def _gantt_options(size: str, window: str | None, ranks: str | None = None) -> dict:
    """--gantt-size, --gantt-window and --gantt-ranks, checked before any work."""
    from ..report.gantt_sizes import SIZES
    if size not in SIZES:
        raise BadInput(f"--gantt-size {size!r}: expected one of {', '.join(SIZES)}")
    span = None
    if window is not None:
        try:
            start, end = (float(part) for part in window.split(","))
        except ValueError:
            raise BadInput(f"--gantt-window {window!r}: expected START,END in seconds, e.g. 0,4") from None
        if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
            raise BadInput(f"--gantt-window {window!r}: expected finite 0 <= START < END")
        if end - start < MIN_GANTT_WINDOW_S:  # matplotlib's text rasterizer overflows on narrower spans
            raise BadInput(f"--gantt-window {window!r}: narrower than the {MIN_GANTT_WINDOW_S * 1e6:g} us "
                           "the Gantt chart can draw")
        span = (start, end)
    picked = None
    if ranks is not None:
        try:
            picked = sorted({int(part) for part in ranks.split(",")})
        except ValueError:
            raise BadInput(f"--gantt-ranks {ranks!r}: expected global ranks, e.g. 0,64,128") from None
    return {"gantt_size": size, "gantt_window": span, "gantt_ranks": picked}


def megatron_line(scenario) -> str:
    """The scenario's layout as one line of Megatron-LM arguments."""
    import shlex

    from ..scenario.megatron_export import to_megatron_args
    try:
        return shlex.join(to_megatron_args(scenario))
    except ValueError as e:  # what Megatron-LM cannot run (recompute: op), said with its nearest
        raise BadInput(f"--megatron-args: {e}") from None
