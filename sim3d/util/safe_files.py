"""Files in an output folder that cannot be hijacked, torn or mixed with another run's.

Every output is written to a fresh temporary file in its folder and renamed over its target:
a rename replaces the folder's entry, so a symbolic or hard link planted at the target is
replaced, never written through, and a writer that fails (a full disk) leaves the old file or
nothing, not half a file. A target that is not a regular file (a link, dangling or not, a
FIFO that would block the writer, a folder, a device) is refused with its path. One advisory
lock per folder (flock: the kernel drops it when its holder dies, even by SIGKILL) keeps two
sim3d commands from writing into one folder at once, and a manifest of what a run wrote lets
the next run remove what it did not write again.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

LOCK_NAME = ".sim3d.lock"
MANIFEST_NAME = "manifest.json"
TEMP_PREFIX = ".sim3d-"
MAX_MANIFEST_BYTES = 1 << 20


class UnsafeOutput(ValueError):
    """An output path sim3d will not write: not a regular file, linked to another name, or in a
    folder another sim3d command holds. Bad input like a bad scenario (the command exits 2):
    the user removes what is in the way or chooses another folder."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a regular file"


def refuse_unsafe(paths: Iterable[Path]) -> None:
    """UnsafeOutput naming the first path that exists and is not a regular file (lstat: a
    link is judged as itself, never by what it points to, and nothing is opened)."""
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise UnsafeOutput(f"{path}: is {_kind(mode)}; sim3d writes its outputs only as regular files and "
                                "never through links (remove it, or choose another output folder)")


@contextmanager
def naming(*targets: Path) -> Iterator[None]:
    """An OSError in the block names the file it was about (a full disk raises from `write`,
    whose error carries no file name; a temporary file's name would mislead)."""
    try:
        yield
    except OSError as e:
        if e.filename is not None and not Path(str(e.filename)).name.startswith(TEMP_PREFIX):
            raise
        name = ", ".join(str(t) for t in targets)
        raise OSError(e.errno, e.strerror or str(e) or type(e).__name__, name) from e


def _temporary(target: Path) -> Path:
    """A new file beside `target`, created here (O_EXCL: not a link someone planted) with the
    umask's mode, or the mode `target` has; its name ends in the target's name, so writers
    that choose a format by suffix (matplotlib, gzip) see the same suffix."""
    try:
        mode = stat.S_IMODE(os.lstat(target).st_mode)
    except FileNotFoundError:
        mode = None
    for _ in range(16):
        temp = target.with_name(f"{TEMP_PREFIX}{secrets.token_hex(4)}-{target.name}")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        try:
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
        return temp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target))


@contextmanager
def replacing(*targets: Path, durable: bool = False) -> Iterator[list[Path]]:
    """Temporary paths, one per target, for the block to write; each renamed over its target
    when the block succeeds, all removed when it fails. `durable`: fsynced before the rename
    (a table that must survive a power cut; plots and traces can be written again)."""
    targets = tuple(Path(t) for t in targets)
    refuse_unsafe(targets)
    temps: list[Path] = []
    try:
        with naming(*targets):
            for target in targets:
                temps.append(_temporary(target))
            yield temps
            for temp, target in zip(temps, targets):
                if durable:
                    fd = os.open(temp, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                refuse_unsafe([target])  # planted while we wrote: refused, still not followed
                os.replace(temp, target)
    finally:
        for temp in temps:
            try:
                os.unlink(temp)
            except FileNotFoundError:  # renamed: the usual case
                pass


def write_with(target: Path, writer: Callable[[Path], object], durable: bool = False) -> Path:
    """`writer(path)` writes the file (pandas, pyarrow, a plot) at a temporary path that then
    replaces `target`."""
    with replacing(target, durable=durable) as (temp,):
        writer(temp)
    return Path(target)


def write_bytes(target: Path, data: bytes, durable: bool = False) -> Path:
    return write_with(target, lambda temp: temp.write_bytes(data), durable)


def open_for_append(path: Path) -> int:
    """A descriptor appending to the regular file `path` (created if missing), for logs that
    grow row by row and so cannot be renamed into place: O_NOFOLLOW refuses a link and
    O_NONBLOCK keeps a FIFO from blocking the open, which fstat then refuses."""
    refuse_unsafe([path])
    with naming(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        refuse_unsafe([path])
        raise UnsafeOutput(f"{path}: is {_kind(info.st_mode)}; sim3d writes its outputs only as regular files")
    if info.st_nlink > 1:  # appending would change the other names' file too (a cp -al snapshot)
        os.close(fd)
        raise UnsafeOutput(f"{path}: has {info.st_nlink - 1} other hard link(s); sim3d appends only to a file of "
                            "its own (copy the folder, or choose another --out)")
    return fd


# ---- one writer per folder ---------------------------------------------------------------

class FolderLock:
    """The folder's lock, held from construction until `release()` or the end of a `with`;
    its file is removed on release, so that a finished command leaves only its outputs."""

    def __init__(self, folder: Path, command: str):
        self._path = Path(folder) / LOCK_NAME
        self._fd = _take_lock(Path(folder), command)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:  # unlinked while still held: a process that opened it meanwhile sees it gone (_take_lock)
            if _same_file(self._path, fd):
                os.unlink(self._path)
        except OSError:
            pass  # a folder made read-only or removed meanwhile: the lock file is harmless
        finally:
            os.close(fd)

    def __enter__(self) -> "FolderLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def folder_lock(folder: Path, command: str) -> FolderLock:
    """Take `folder`'s lock now; UnsafeOutput at once, naming the holder, when another live
    process holds it. `command` ("run", "sweep", ...) is what a refused process is told."""
    return FolderLock(folder, command)


def _same_file(path: Path, fd: int) -> bool:
    try:
        named, held = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _take_lock(folder: Path, command: str) -> int:
    """The locked descriptor of the folder's lock file. A releasing holder unlinks the file,
    so a lock taken on a file that is no longer the folder's is taken again on the new one."""
    for _ in range(100):
        fd = _lock_file(folder, command)
        if _same_file(folder / LOCK_NAME, fd):
            return fd
        os.close(fd)
    raise UnsafeOutput(f"{folder / LOCK_NAME}: replaced again and again while sim3d took it; is another program "
                       "removing it?")


def _lock_file(folder: Path, command: str) -> int:
    path = folder / LOCK_NAME
    refuse_unsafe([path])
    with naming(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    locked = False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeOutput(f"{path}: is {_kind(info.st_mode)}; the lock sim3d keeps here must be a regular file")
        if info.st_nlink > 1:  # writing the holder's pid would change the other names' file too
            raise UnsafeOutput(f"{path}: has {info.st_nlink - 1} other hard link(s); the lock sim3d keeps here "
                                "must be a file of its own")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UnsafeOutput(f"{folder}: another sim3d command is writing here ({_holder(fd)}); wait for it "
                                "or choose another --out") from None
        locked = True
        with naming(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {command}\n".encode(), 0)
    except BaseException:
        if locked and _same_file(path, fd):  # ours, and unwritten (a full disk): not left behind
            try:
                os.unlink(path)
            except OSError:
                pass
        os.close(fd)
        raise
    return fd


def _holder(fd: int) -> str:
    try:
        pid, command = os.pread(fd, 128, 0).decode(errors="replace").split(maxsplit=1)
    except (OSError, ValueError):  # written by hand, or an older sim3d wrote the pid alone
        return "holder unknown"
    return f"sim3d {command.strip()}, process {pid}"


# ---- what a run wrote, and what an earlier run left --------------------------------------

def record_outputs(folder: Path, written: list[Path], about: dict, removable: Iterable[str]) -> list[str]:
    """Remove the files an earlier manifest in `folder` names that this run did not write,
    then write this run's manifest (`about`, and each written file's size and mtime). A file
    is removed only if its name is one of `removable` (the names the command can write: a
    forged manifest cannot name a user's file) and it is still exactly as sim3d left it (same
    size and mtime, a regular file): a file a user edited, replaced or added stays. Returns
    the names removed."""
    folder = Path(folder)
    manifest = folder / MANIFEST_NAME
    names = {Path(p).name for p in written}
    allowed = set(removable)
    removed = []
    earlier = _earlier_files(manifest)
    # another command's files in the same folder (a goodput beside a run) stay listed, so that
    # their own command can still tell its old outputs from the user's
    others = [e for e in earlier if isinstance(e.get("name"), str) and e["name"] not in names
              and e["name"] not in allowed and _plain(e["name"])]
    for entry in earlier:
        name = entry.get("name")
        if not isinstance(name, str) or name in names or name not in allowed or not _plain(name):
            continue
        path = folder / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (st.st_size, st.st_mtime_ns) == (entry.get("bytes"), entry.get("mtime_ns")):
            with naming(path):
                os.unlink(path)
            removed.append(name)
    files = list(others)
    for p in written:
        st = os.lstat(p)
        files.append({"name": Path(p).name, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    write_bytes(manifest, (json.dumps({**about, "files": files}, indent=2) + "\n").encode())
    return removed


def _plain(name: str) -> bool:
    return (name not in ("", ".", "..") and "/" not in name and "\0" not in name and name != MANIFEST_NAME
            and name != LOCK_NAME and Path(name).name == name)


def read_manifest(folder: Path) -> dict:
    """The folder's manifest as written; {} when it is missing, not a regular file, too large
    or unreadable (in doubt, nothing in the folder counts as sim3d's)."""
    manifest = Path(folder) / MANIFEST_NAME
    try:
        st = os.lstat(manifest)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
            return {}
        record = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _earlier_files(manifest: Path) -> list[dict]:
    """The earlier manifest's file entries; none when it is missing or unreadable (in doubt,
    nothing is removed)."""
    files = read_manifest(manifest.parent).get("files")
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []
