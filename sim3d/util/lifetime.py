"""Child processes that do not outlive their parent.

A sweep's pool workers and the executor's ranks are killed with their parent even when the
parent dies by SIGKILL (no chance to clean up): on Linux the kernel delivers SIGKILL to the
child when the parent thread exits (prctl PR_SET_PDEATHSIG, man 2 prctl); elsewhere a daemon
thread polls the parent's pid.

A forkserver's children cannot use the parent signal: their parent is the forkserver, which
lives as long as they do (each child holds its "alive" pipe). They watch the launching process
itself with `die_with(pid)` (a pidfd, which cannot be fooled by pid reuse).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(poll_s: float = 1.0, parent: int | None = None) -> None:
    """Call first thing in a child process. `parent`: the parent's pid as the parent knew it
    before starting the child; without it a parent that died before this call goes unseen
    (the child would already be init's)."""
    parent = os.getppid() if parent is None else parent
    if os.getppid() != parent:
        os._exit(1)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # the parent died before the call
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def die_with(pid: int, poll_s: float = 0.5) -> None:
    """Exit this process as soon as process `pid` (not necessarily the parent) exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3): poll
        def poll() -> None:
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    os._exit(1)
                except PermissionError:
                    pass
                time.sleep(poll_s)
        threading.Thread(target=poll, name="die-with", daemon=True).start()
        return

    def wait() -> None:
        select.select([fd], [], [])  # readable once the process has exited
        os._exit(1)
    threading.Thread(target=wait, name="die-with", daemon=True).start()


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP, a debugger): state T or t in /proc/PID/stat.
    A stopped process is not dead, so nothing that waits for its exit ever returns."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")
