"""Whose a file at an output path is: sim3d's, which a command may replace, or the user's,
which it leaves alone unless told (`--force`).

A file is sim3d's when the folder's manifest (safe_files.MANIFEST_NAME) lists its name, or when
its own bytes carry the mark of the output of that name: a figure matplotlib drew (its
PNG/PDF/SVG metadata names matplotlib), a table whose header line is the one sim3d writes, a
summary, trace or page with sim3d's keys. Committed reports carry no manifest (it is
machine-local), so the marks are what lets `sim3d run scenarios/gpt3.yaml` on a fresh clone
replace the report it ships, and what keeps it from replacing a user's own `links.csv`.

Two rules stand above `--force`'s: no output replaces one of the command's inputs (a scenario, a
profile, whatever its name in the folder), and a file a command measured (`sim3d execute`'s
trace.csv) is replaced by that command alone unless forced, never silently by a simulation.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path
from typing import Callable, Iterable

from .safe_files import UnsafeOutput, read_manifest

PEEK_BYTES = 4096
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
MAX_JSON_BYTES = 16 << 20  # a summary or a page; larger JSON is judged by its first bytes


def _header(*columns: str) -> Callable[[bytes, bytes, Path], bool]:
    start = ",".join(columns).encode()
    return lambda head, tail, path: head.split(b"\n", 1)[0].rstrip(b"\r").startswith(start)


def _gzipped_trace(head: bytes, tail: bytes, path: Path) -> bool:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(32).startswith(b'{"traceEvents":')
    except (OSError, EOFError):
        return False


def _json_with(key: str) -> Callable[[bytes, bytes, Path], bool]:
    def mark(head: bytes, tail: bytes, path: Path) -> bool:
        if path.stat().st_size > MAX_JSON_BYTES:
            return False
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return False
        return isinstance(document, dict) and key in document
    return mark


# The outputs sim3d writes under a fixed name, and the mark of each (docs/contracts.md names
# the columns and keys).
MARKS: dict[str, Callable[[bytes, bytes, Path], bool]] = {
    "summary.json": _json_with("step_time_s"),
    "trace.csv": _header("rank", "stage", "chunk", "microbatch", "kind", "stream", "start_s", "end_s"),
    "trace.json": lambda head, tail, path: head.startswith(b'{"traceEvents":'),
    "trace.json.gz": _gzipped_trace,
    "trace.parquet": lambda head, tail, path: head.startswith(b"PAR1") and b"microbatch" in tail,
    "links.csv": _header("src", "dst", "kind", "bandwidth_Bps"),
    "schedule.csv": lambda head, tail, path: head.startswith(b"# schedule="),
    "samples.csv": _header("sample", "step_time_s"),
    "candidates.csv": _header("tp", "pp", "dp"),
    "finalists.csv": _header("tp", "pp", "dp"),
    "goodput.csv": _header("gpus", "mtbf_h"),
    "rules.json": _json_with("rules"),
    "index.md": lambda head, tail, path: head.startswith(b"# Rules of thumb"),
    "scenario.yaml": lambda head, tail, path: head.startswith(b"# The scenario `sim3d execute` ran"),
}


# What a command measured rather than computed: only the command itself replaces it (`sim3d
# execute`'s trace.csv is a real run's timing; `sim3d run` into its folder would put a
# simulated trace in its place).
MEASURED_BY = {"sim3d execute": {"trace.csv"}}


def _listed(path: Path) -> bool:
    files = read_manifest(path.parent).get("files")
    return isinstance(files, list) and any(isinstance(f, dict) and f.get("name") == path.name for f in files)


def measured_by(path: Path) -> str | None:
    """The command whose measurement the file at `path` is, by its folder's manifest, or None."""
    writer = read_manifest(path.parent).get("written_by")
    return writer if path.name in MEASURED_BY.get(writer, ()) and _listed(path) else None


def written_by_sim3d(path: Path) -> bool:
    """Whether the regular file at `path` is one sim3d wrote (see the module's docstring)."""
    if _listed(path):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(PEEK_BYTES)
            f.seek(max(0, os.fstat(f.fileno()).st_size - PEEK_BYTES))
            tail = f.read()
    except OSError:
        return False
    if path.suffix.lower() in FIGURE_SUFFIXES:
        return b"matplotlib" in (head + tail).lower()
    mark = MARKS.get(path.name)
    if mark is None and path.suffix.lower() == ".csv":  # `schedule --csv` names its file freely
        mark = MARKS["schedule.csv"]
    return mark is not None and mark(head, tail, path)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def refuse_foreign(paths: Iterable[Path], force: bool = False, inputs: Iterable[Path | str | None] = (),
                   writer: str | None = None) -> None:
    """UnsafeOutput naming the first output path that is one of the command's `inputs` (a
    scenario, a profile: always, --force or not), or that holds a regular file sim3d did not
    write, unless `force`. Call after safe_files.refuse_unsafe (which refuses what is not a
    regular file) and before any work, so that nothing is replaced when one output is refused."""
    paths = [Path(p) for p in paths]
    for given in (Path(i) for i in inputs if i):
        for path in paths:
            if path.exists() and _same_file(path, given):
                alias = "" if str(path) == str(given) else f" (as {given})"
                raise UnsafeOutput(f"{path}: is an input of this command{alias}; its outputs never replace "
                                   "their inputs (--force does not change that): choose another output folder")
    if force:
        return
    for path in paths:
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue  # refuse_unsafe's to judge
        except FileNotFoundError:
            continue
        if (measurer := measured_by(path)) and measurer != writer:
            raise UnsafeOutput(f"{path}: was measured by `{measurer}`, not computed; `{writer}` would replace "
                               "it with a simulation: choose another output folder, or --force to replace it")
        if not written_by_sim3d(path):
            raise UnsafeOutput(f"{path}: exists and is not a file sim3d wrote (no sim3d manifest lists it and it "
                               "does not start as sim3d's output of that name does); choose another output folder, "
                               "or --force to replace it")
