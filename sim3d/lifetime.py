"""Child processes that do not outlive their parent.

A sweep's pool workers and the executor's ranks are killed with their parent even when the
parent dies by SIGKILL (no chance to clean up): on Linux the kernel delivers SIGKILL to the
child when the parent thread exits (prctl PR_SET_PDEATHSIG, man 2 prctl); elsewhere a daemon
thread polls the parent's pid.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(poll_s: float = 1.0) -> None:
    """Call first thing in a child process."""
    parent = os.getppid()
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
