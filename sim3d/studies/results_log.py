"""An append-only, crash-safe results table for long studies (sweep OUT/results.csv).

Each row reaches the file in one `write` on an O_APPEND descriptor and is fsynced, so a kill
at any moment leaves whole rows and at most one torn last line, which `--resume` cuts off and
recomputes. The header is on disk before the first point starts. `sweep.json` beside the
table records the grid and the scenario's digest, and `--resume` refuses a table written by
another grid or scenario. The caller holds the folder's lock (util/safe_files.folder_lock),
so that two sweeps never interleave in one folder; the table is never opened through a link.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path

from ..errors import ScenarioError
from ..util.safe_files import naming, open_for_append, refuse_unsafe, write_bytes
from .runner import WORKER_DIED

META_NAME = "sweep.json"


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class ResultsLog:
    """Open with `ResultsLog.open(...)` while holding the folder's lock; `done` holds the labels
    already in the table; `append` writes one whole row."""

    def __init__(self, path: Path, columns: list[str], fd: int, done: dict[str, dict]):
        self.path, self.columns, self._fd, self.done = path, columns, fd, done

    @classmethod
    def open(cls, folder: Path, columns: list[str], meta: dict, resume: bool) -> "ResultsLog":
        """`meta`: what identifies the study (grid keys, scenario digest, ...); `meta["grid"]`
        may grow on resume (new values of the same keys), everything else must match."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "results.csv"
        refuse_unsafe([path, folder / META_NAME])  # before anything reads or truncates them
        done = _recover(path, columns, folder / META_NAME, meta) if resume else _refuse_existing(path)
        _write_meta(folder / META_NAME, meta)
        fd = open_for_append(path)
        try:
            if os.fstat(fd).st_size == 0:
                _write_all(fd, _line(columns), path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, columns, fd, done)

    def append(self, row: dict) -> None:
        _write_all(self._fd, _line([row.get(c, "") for c in self.columns]), self.path)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _line(values) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue().encode()


def _write_all(fd: int, data: bytes, path: Path) -> None:
    with naming(path):
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)


def _refuse_existing(path: Path) -> dict:
    if path.exists() and path.stat().st_size:
        raise ScenarioError(f"{path} exists: pass --resume to continue it, or choose another --out")
    return {}


def _write_meta(path: Path, meta: dict) -> None:
    write_bytes(path, (json.dumps(meta, indent=2) + "\n").encode(), durable=True)


def _recover(path: Path, columns: list[str], meta_path: Path, meta: dict) -> dict[str, dict]:
    """Rows already in the table by label; a torn last line is cut off (its point reruns), and
    so are rows whose worker died (not a property of the point: they run again)."""
    has_rows = path.exists() and path.read_bytes().count(b"\n") > 1
    try:
        old = json.loads(meta_path.read_text()) if meta_path.exists() else None
    except ValueError:
        old = None
    if old is not None and not _a_study_record(old):  # edited by hand into something else
        raise ScenarioError(f"{meta_path}: not a study record sim3d wrote (expected an object with a grid of "
                            "lists); restore it, or choose another --out")
    if old is None and has_rows:
        raise ScenarioError(f"{meta_path}: missing or unreadable, so {path} cannot be matched to this grid and "
                            "scenario; choose another --out")
    if old is not None:
        _check_same_study(meta_path, old, meta)
        meta["grid"] = {k: list(dict.fromkeys([*old["grid"].get(k, []), *v])) for k, v in meta["grid"].items()}
    if not path.exists():
        return {}
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as f:
            f.truncate(cut)
        data = data[:cut]
    if not data:
        return {}
    try:
        rows = list(csv.reader(io.StringIO(data.decode())))
    except (UnicodeDecodeError, csv.Error) as e:
        raise ScenarioError(f"{path}: not a results table sim3d wrote ({e}); choose another --out") from None
    if rows[0] != columns:
        raise ScenarioError(f"{path}: its columns are {rows[0]}, this grid gives {columns}; a resumed sweep must "
                            "keep the grid's keys (choose another --out for a new grid)")
    done = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(columns):
            raise ScenarioError(f"{path}: line {number} has {len(row)} fields, expected {len(columns)}; "
                                "the table was edited or damaged")
        done[row[0]] = dict(zip(columns, row))
    died = {label for label, row in done.items() if row.get("error", "").startswith(WORKER_DIED)}
    if died:
        kept = [rows[0]] + [r for r in rows[1:] if r[0] not in died]
        write_bytes(path, b"".join(_line(r) for r in kept), durable=True)
    return {label: row for label, row in done.items() if label not in died}


def _a_study_record(old) -> bool:
    grid = old.get("grid") if isinstance(old, dict) else None
    return isinstance(grid, dict) and all(isinstance(v, list) for v in grid.values())


def _check_same_study(meta_path: Path, old: dict, new: dict) -> None:
    for key in new:
        if key == "grid":
            if list(old.get("grid", {})) != list(new["grid"]):
                raise ScenarioError(f"{meta_path}: this folder holds a sweep over {list(old.get('grid', {}))}, "
                                    f"not {list(new['grid'])}; choose another --out")
        elif key == "inputs_sha256":
            # a record without digests (an earlier sim3d) vouches only for a sweep that reads no file
            before = old.get(key, {} if not new[key] else None)
            if before is None:
                raise ScenarioError(f"{meta_path}: this sweep's record does not say which {', '.join(new[key])} "
                                    "it read; its rows may not match them (choose another --out)")
            changed = sorted(f for f in {*before, *new[key]} if before.get(f) != new[key].get(f))
            if not changed:
                continue
            raise ScenarioError(f"{meta_path}: {', '.join(changed)} changed since this sweep started (SHA-256 differs); "
                                "its rows would mix two cost models (choose another --out, or restore the file)")
        elif old.get(key) != new[key]:
            raise ScenarioError(f"{meta_path}: {key} was {old.get(key)!r} when this sweep started, now "
                                f"{new[key]!r}; its rows would mix two studies (choose another --out)")
