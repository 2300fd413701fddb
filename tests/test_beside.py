"""The output process of `sim3d run` (sim3d/report/beside.py): its files, its errors and its
death all reach the caller, and an unused one stops cleanly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sim3d.report import beside


@pytest.fixture(params=[False, True], ids=["forked", "serial"])
def serial(request, monkeypatch):
    monkeypatch.setattr(beside, "_SERIAL", request.param)
    if not request.param and not beside.can_fork():
        pytest.skip("no fork on this platform")
    return request.param


@pytest.fixture
def forked(monkeypatch):
    """For what only a forked process can do: die, fail to import, send errors back pickled."""
    monkeypatch.setattr(beside, "_SERIAL", False)
    if not beside.can_fork():
        pytest.skip("no fork on this platform")


def write_pid(path: Path) -> None:
    path.write_text(str(os.getpid()))


def refuse(message: str) -> None:
    raise ValueError(message)


def test_the_job_runs_with_its_arguments_and_its_files_are_there_when_waited_for(tmp_path, serial):
    process = beside.Beside(preload=["json"])
    process.submit(write_pid, tmp_path / "drawn.txt")
    process.wait()
    assert (int((tmp_path / "drawn.txt").read_text()) != os.getpid()) == (not serial)  # forked: another process
    process.close()  # after the job: nothing left to stop
    assert process._process is None


def test_an_error_is_raised_again_with_the_processs_traceback(serial):
    process = beside.Beside()
    process.submit(refuse, "nothing runs in the window")
    with pytest.raises(ValueError, match="nothing runs in the window") as caught:
        process.wait()
    if not serial:
        assert any("in the output process" in note and "refuse" in note for note in caught.value.__notes__)


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no")


def raise_unpicklable() -> None:
    raise Unpicklable("odd")


def test_a_process_that_dies_is_reported_with_its_exit_code(forked):
    process = beside.Beside()
    process.submit(os._exit, 3)
    with pytest.raises(RuntimeError, match="exit code 3"):
        process.wait()


def test_a_process_never_given_a_job_stops_on_close_without_waiting_for_its_imports(serial):
    process = beside.Beside(preload=["matplotlib.pyplot"])  # half a second of imports
    child = process._process
    process.close()
    if not serial:
        assert child.exitcode is not None and not child.is_alive()
    with pytest.raises(RuntimeError, match="nothing was submitted"):
        process.wait()


def test_a_failed_preload_is_reported_when_waited_for(forked):
    process = beside.Beside(preload=["sim3d_no_such_module"])
    process.submit(write_pid, Path("unused"))
    with pytest.raises(ModuleNotFoundError, match="sim3d_no_such_module"):
        process.wait()


class NeedsTwoArguments(Exception):
    def __init__(self, a, b):  # pickles, but unpickling calls __init__ with one argument
        super().__init__(f"{a} {b}")


def raise_needs_two() -> None:
    raise NeedsTwoArguments("first", "second")


@pytest.mark.parametrize("raiser, text", [(raise_unpicklable, "Unpicklable: odd"),
                                          (raise_needs_two, "NeedsTwoArguments: first second")])
def test_an_error_that_does_not_survive_pickling_arrives_as_text(forked, raiser, text):
    process = beside.Beside()
    process.submit(raiser)
    with pytest.raises(RuntimeError, match=text):
        process.wait()


def test_a_job_that_does_not_pickle_runs_in_the_caller(tmp_path, serial):
    process = beside.Beside()
    here, there = tmp_path / "here.txt", tmp_path / "there.txt"
    process.submit(lambda: here.write_text(str(os.getpid())))  # a lambda does not pickle
    process.submit(write_pid, there)
    process.wait()
    assert int(here.read_text()) == os.getpid()
    assert (int(there.read_text()) == os.getpid()) == serial


def test_jobs_run_in_order_and_the_first_error_ends_them(tmp_path, serial):
    process = beside.Beside()
    process.submit(write_pid, tmp_path / "first.txt")
    process.submit(refuse, "the second job fails")
    process.submit(write_pid, tmp_path / "third.txt")
    with pytest.raises(ValueError, match="the second job fails"):
        process.wait()
    assert (tmp_path / "first.txt").exists() and not (tmp_path / "third.txt").exists()


def test_close_is_safe_after_the_process_died_and_twice(serial):
    process = beside.Beside(preload=["json"])
    if not serial:
        process._process.kill()
        process._process.join()
    process.close()
    process.close()
    assert process._process is None


def test_the_process_dies_with_its_caller():
    """A caller killed outright (SIGKILL, the OOM killer) leaves no plotting process behind."""
    import subprocess
    import sys
    import time
    if not beside.can_fork():
        pytest.skip("no fork on this platform")
    code = ("import os; from sim3d.report import beside; p = beside.Beside(preload=['json']); "
            "print(p._process.pid, flush=True); os._exit(0)")
    caller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = int(caller.stdout.readline())  # not read to the end: an orphan would hold the pipe open
    assert caller.wait(timeout=60) == 0
    caller.stdout.close()

    def alive() -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        return state not in ("Z", "X")  # a zombie has died; its reaper is init's business

    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    orphaned = alive()
    if orphaned:
        os.kill(pid, 9)
    assert not orphaned


def test_a_caller_with_other_threads_is_not_forked(monkeypatch):
    import threading
    monkeypatch.setattr(beside, "_SERIAL", False)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    try:
        assert not beside.can_fork()
        process = beside.Beside()
        assert process._process is None  # the job will run in the caller
    finally:
        stop.set()
        worker.join()


def write_bytes(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def test_a_job_is_handed_over_while_the_process_still_imports(tmp_path, forked, monkeypatch):
    """A megabyte of job does not fit the pipe: the process takes it off the pipe while its
    preload still runs (here an import held until a gate file appears), so submit returns."""
    import threading
    gate = tmp_path / "gate"
    (tmp_path / "held_import.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.01)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    process = beside.Beside(preload=["held_import"])
    handed = threading.Thread(target=process.submit, args=(write_bytes, tmp_path / "big.bin", b"x" * 2**20))
    handed.start()
    handed.join(timeout=60)
    finished = not handed.is_alive()
    gate.touch()  # let the import end either way, so nothing hangs
    handed.join()
    assert finished, "submit waited for the process's imports"
    process.wait()
    assert (tmp_path / "big.bin").stat().st_size == 2**20


def test_a_failing_job_run_here_still_stops_the_process(tmp_path, forked):
    import multiprocessing
    process = beside.Beside()
    process.submit(write_pid, tmp_path / "there.txt")
    process.submit(lambda: refuse("the local job fails"))  # does not pickle: runs here
    with pytest.raises(ValueError, match="the local job fails"):
        process.wait()
    assert process._process is None and multiprocessing.active_children() == []


def collector_state(path: Path) -> None:
    import gc
    path.write_text(f"{gc.isenabled()} {gc.get_freeze_count() > 0}")


def test_the_process_collects_though_forked_where_the_caller_paused_it(tmp_path, forked):
    """write_run_outputs pauses the collector and may start the process inside that pause;
    the plots make reference cycles, so the process must collect again. What the caller had
    when it forked is frozen there, not collected again."""
    import gc

    from sim3d.util.gc_control import gc_paused
    with gc_paused():
        process = beside.Beside()
    process.submit(collector_state, tmp_path / "state.txt")
    process.wait()
    assert (tmp_path / "state.txt").read_text() == "True True"
    assert gc.isenabled() and gc.get_freeze_count() == 0  # the caller's objects stay collectable


def test_a_callers_own_freeze_outlives_the_process(forked):
    """gc.unfreeze does not nest: a caller that froze objects itself must find them frozen
    after starting the process."""
    import gc
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        process = beside.Beside()
        assert gc.get_freeze_count() == frozen > 0
        process.close()
    finally:
        gc.unfreeze()


def write_digest(path: Path, payload: bytes) -> None:
    import hashlib
    path.write_text(hashlib.sha256(payload).hexdigest())


def test_a_job_larger_than_the_pipe_arrives_whole_and_leaves_no_file(tmp_path, forked, monkeypatch):
    import hashlib
    monkeypatch.setenv("TMPDIR", str(tmp_path / "spill"))
    (tmp_path / "spill").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    payload = os.urandom(3 * beside.SPILL_ABOVE)
    process = beside.Beside(preload=["json"])
    process.submit(write_digest, tmp_path / "digest.txt", payload)
    assert len(list((tmp_path / "spill").iterdir())) == 1  # it went through a file
    process.wait()
    assert (tmp_path / "digest.txt").read_text() == hashlib.sha256(payload).hexdigest()
    assert not list((tmp_path / "spill").iterdir())
    stopped = beside.Beside(preload=["json"])
    stopped._process.kill()  # it never reads its job: the caller removes the file
    stopped._process.join()
    stopped.submit(write_digest, tmp_path / "never.txt", payload)
    stopped.close()
    assert not list((tmp_path / "spill").iterdir()) and not (tmp_path / "never.txt").exists()


@pytest.mark.parametrize("failure", ["no temporary directory", "full disk"])
def test_a_job_goes_by_the_pipe_when_no_temporary_file_can_be_written(tmp_path, forked, monkeypatch, failure):
    """A full (or missing) TMPDIR must not fail a run whose own folder is fine: the job is sent
    over the pipe as before spilling existed, and the half-written file is removed."""
    import errno
    import hashlib
    import tempfile
    started = tmp_path / "sim3d-job-started"

    def mkstemp(prefix=""):
        if failure == "no temporary directory":
            raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found")
        started.write_bytes(b"")
        return os.open("/dev/full", os.O_WRONLY), str(started)  # every write: ENOSPC

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    payload = os.urandom(3 * beside.SPILL_ABOVE)
    process = beside.Beside(preload=["json"])
    process.submit(write_digest, tmp_path / "digest.txt", payload)
    process.wait()
    assert (tmp_path / "digest.txt").read_text() == hashlib.sha256(payload).hexdigest()
    assert not started.exists()
