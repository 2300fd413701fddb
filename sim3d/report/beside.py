"""A second process for output work, started early so that its imports overlap the simulation.

`sim3d run` spends most of its wall time importing matplotlib and drawing three PNGs, work
that needs nothing but the finished result, while a laptop has more than one core. So the
CLI starts a `Beside` process before it simulates: the process imports what the work needs
(`preload`) while the step is replayed, then receives jobs (module-level functions and their
arguments, pickled: ~10 ms for the flagship's trace) and runs them in order, each as soon as
it arrives, while the caller writes the tables and traces. An error in the process is raised again in the caller, with the
process's traceback attached; a process that dies says so with its exit code; the process
dies with its caller (sim3d.util.lifetime), and an interrupted or failed caller stops it.

On Linux a single-threaded caller is forked. Elsewhere (spawn would re-import everything),
beside other Python threads, with SIM3D_SERIAL_OUTPUTS=1 (debuggers, profilers), where the
fork fails, and for a job that does not pickle, the job runs in the caller when waited for.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import tempfile
import threading
import traceback
from typing import Callable, Sequence

from ..util.lifetime import die_with_parent

_SERIAL = os.environ.get("SIM3D_SERIAL_OUTPUTS", "") not in ("", "0")
STOP_GRACE_S = 10.0  # what a stopped process has to unwind (an import halfway releases its locks)


def can_fork() -> bool:
    """Fork only a single-threaded caller (the CLI is; a notebook is not): a lock another
    Python thread holds at the fork would stay locked in the child forever. Ray's own threads
    (gRPC, its event loops: native, so `threading` does not count them) are such threads once
    it is imported; the CLI never imports Ray before it plots."""
    return (sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods() and not _SERIAL
            and threading.active_count() == 1 and "ray" not in sys.modules)


class Beside:
    """Start with `Beside(preload=[module names])`; then `submit(fn, *args)` as often as there
    is work and `wait()` once, or `close()` to stop it (safe to call at any time, more than
    once)."""

    def __init__(self, preload: Sequence[str] = ()):
        self._submitted = False
        self._here: list[tuple] = []  # jobs the caller runs when it waits
        self._spilled: list[str] = []  # files of jobs too large for the pipe (removed on _stop)
        self._process = None
        if not can_fork():
            return
        context = multiprocessing.get_context("fork")
        job_reader, self._jobs = context.Pipe(duplex=False)
        self._outcomes, outcome_writer = context.Pipe(duplex=False)
        process = context.Process(target=_serve, args=(os.getpid(), tuple(preload), job_reader, outcome_writer),
                                  name="sim3d-outputs", daemon=True)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            stream.flush()
        # the child's collector leaves what it inherits alone: it would rescan all of it (a
        # twentieth of a second, twice on the flagship) and write to its pages, which the
        # child then copies (gc.freeze, as the Python docs advise before a fork); the caller
        # collects its own objects as before. A caller that froze objects itself keeps its
        # freeze (unfreeze does not nest), and its child inherits that.
        ours = gc.get_freeze_count() == 0
        if ours:
            gc.freeze()
        try:
            process.start()
        except OSError:  # no fork to be had (EAGAIN, ENOMEM): the caller draws
            self._close_pipes()
            return
        finally:
            if ours:
                gc.unfreeze()
            job_reader.close()  # the child's ends, closed here so that a dead child reads as EOF
            outcome_writer.close()
        self._process = process

    def submit(self, work: Callable, *args) -> None:
        self._submitted = True
        if self._process is None:
            self._here.append((work, args))
            return
        try:
            payload = pickle.dumps((work, args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - whatever does not pickle is drawn here instead
            self._here.append((work, args))
            return
        if len(payload) > SPILL_ABOVE:
            payload = self._spill(payload) or payload
        try:
            self._jobs.send_bytes(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the process has ended already; wait() says why

    def _spill(self, payload: bytes) -> bytes | None:
        """A large job goes through a file and the pipe carries its name: the pipe would take
        its megabytes in 64 KiB pieces, each only when the process's reader thread gets the GIL
        from the plot being drawn (the flagship's Gantt trace waited 0.07 s so). None when no
        temporary file can be written (a full or read-only TMPDIR): the job goes by the pipe,
        as it would have before, rather than failing a run whose own folder is fine."""
        try:
            fd, path = tempfile.mkstemp(prefix="sim3d-job-")
        except OSError:
            return None
        self._spilled.append(path)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(payload)
        except OSError:
            _remove(path)
            self._spilled.remove(path)
            return None
        return _SPILLED + os.fsencode(path)

    def wait(self) -> None:
        """Block until every job is done; raise what the first failing one raised."""
        if not self._submitted:
            raise RuntimeError("Beside.wait: nothing was submitted")
        here, self._here = self._here, []
        if self._process is None:
            for work, args in here:
                work(*args)
            return
        try:
            self._jobs.send_bytes(_NO_MORE_JOBS)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            for work, args in here:  # what did not pickle, drawn here while the process works
                work(*args)
        except BaseException:
            self._stop()
            raise
        try:
            outcome = self._outcomes.recv()
        except EOFError:  # it ended without a word: killed, or crashed in C
            self._process.join()
            outcome = (RuntimeError(f"the output process died (exit code {self._process.exitcode})"), "")
        except Exception as error:  # noqa: BLE001 - an error that pickled but does not unpickle
            outcome = (RuntimeError(f"the output process failed; its error could not be read back: {error!r}"), "")
        except BaseException:  # Ctrl+C: do not wait for the plots
            self._stop()
            raise
        self._stop()
        if outcome is not None:
            error, detail = outcome
            if detail and hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(f"in the output process:\n{detail}")
            raise error

    def close(self) -> None:
        """Stop the process (after `wait`, it is gone already): for bad input, an error or an
        interrupt in the caller. Nothing the process holds is worth keeping."""
        self._stop()

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.exitcode is None:
            process.terminate()
        # SIGTERM unwinds the process between bytecodes; one stuck inside C (a lock inherited
        # locked through the fork) never gets there: it is killed, never waited for forever
        process.join(STOP_GRACE_S)
        if process.exitcode is None:
            process.kill()
            process.join()
        self._close_pipes()
        for path in self._spilled:  # read and removed by the process, unless it stopped first
            _remove(path)
        self._spilled = []

    def _close_pipes(self) -> None:
        for end in (getattr(self, "_jobs", None), getattr(self, "_outcomes", None)):
            if end is not None:
                end.close()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_NO_MORE_JOBS = b""
_SPILLED = b"spilled:"  # then a file's name; a pickle starts with b"\x80"
SPILL_ABOVE = 64 * 1024  # a Linux pipe's default buffer


def _serve(caller: int, preload: tuple[str, ...], jobs, outcomes) -> None:
    """The process: import, run each job as it arrives until told there are no more, report
    (the first error ends it). A reader thread takes the jobs off the pipe as they come, so
    that the caller never waits for this process's imports to hand one over; being stopped
    (SIGTERM) unwinds like an exception, so that an import interrupted halfway releases its
    locks (matplotlib's font cache lock, left behind, stalls every later import)."""
    die_with_parent(parent=caller)
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_jobs, args=(jobs, inbox), daemon=True).start()
    try:
        # what the imports build lasts as long as the process: the collector, which would
        # scan it again and again while it is built (a twentieth of a second for matplotlib),
        # is started after them and leaves it alone (gc.freeze)
        gc.disable()
        for module in preload:
            importlib.import_module(module)
        gc.freeze()
        gc.enable()  # the plots make cycles (forked where the caller may have paused it)
        while (payload := inbox.get()) != _NO_MORE_JOBS:
            if payload is None:  # the caller went away without a word
                return
            if payload.startswith(_SPILLED):
                path = os.fsdecode(payload[len(_SPILLED):])
                with open(path, "rb") as file:
                    payload = file.read()
                os.unlink(path)
            work, args = pickle.loads(payload)
            work(*args)
        outcomes.send(None)
    except SystemExit:  # stopped by the caller: nobody waits for an outcome
        return
    except BaseException as error:  # noqa: BLE001 - everything goes back to the caller
        detail = traceback.format_exc()
        try:  # an exception that does not survive pickling still sends its text
            pickle.loads(pickle.dumps(error))
        except Exception:  # noqa: BLE001
            error = RuntimeError(f"{type(error).__name__}: {error}")
        outcomes.send((error, detail))


def _read_jobs(jobs, inbox) -> None:
    try:
        while True:
            payload = jobs.recv_bytes()
            inbox.put(payload)
            if payload == _NO_MORE_JOBS:
                return
    except (EOFError, OSError):
        inbox.put(None)


def _exit_on_terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)
