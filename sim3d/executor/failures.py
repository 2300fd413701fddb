"""Why a rank of an executed run failed: its exit code or signal, or, when every report is a
consequence of another rank's failure (a peer's closed connection, a timeout), the rank that
went silent and the state its process is in (sim3d/executor/launch.py asks)."""

from __future__ import annotations

import signal
from pathlib import Path

SECONDARY = ("connection closed", "connection reset", "timed out", "timeout", "broken pipe",
             "econnreset", "socket closed", "read error", "connection refused", "peer")


# Signals a process raises on itself when it crashes; any other came from outside.
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def note_exits(procs, payloads: dict, failures: dict, killed: set) -> None:
    """File each rank process that ended without a result: its exit code, or the signal that
    killed it (`killed`: one sent from outside sim3d)."""
    for rank, p in enumerate(procs):
        if rank not in payloads and rank not in failures and p.exitcode not in (None, 0):
            code = p.exitcode
            if code > 0:
                failures[rank] = f"process exited with code {code}"
            else:
                failures[rank] = f"process killed by signal {-code} ({_signal_name(-code)})"
                if -code not in CRASH_SIGNALS:
                    killed.add(rank)
                    failures[rank] += ", sent from outside sim3d (the OOM killer, a job scheduler or a user)"


def root_cause(failures: dict[int, str], silent: dict) -> tuple[int, str]:
    """The rank to blame and why. A rank that raised for its own reasons comes first; when
    every report is a consequence (a timeout, a closed connection), a rank that has said
    nothing at all while the others gave up waiting is the one that hung."""
    def secondary(text: str) -> bool:
        last = text.strip().splitlines()[-1].lower() if text.strip() else ""
        return any(word in last for word in SECONDARY)
    primary = [r for r, e in failures.items() if not secondary(e)]
    if primary:
        return min(primary), failures[min(primary)]
    if silent:  # a stopped or dead process first: a healthy one may just not have reported yet
        stuck = [r for r in sorted(silent) if process_state(silent[r].pid).startswith(("process stopped",
                                                                                          "process exited"))]
        rank = stuck[0] if stuck else min(silent)
        return rank, (f"stopped responding ({process_state(silent[rank].pid)}); ranks {sorted(failures)} "
                      "timed out waiting for it")
    return min(failures), failures[min(failures)]


def process_state(pid: int | None) -> str:
    states = {"T": "process stopped, e.g. by SIGSTOP or a debugger", "t": "process stopped by a tracer",
              "D": "process in uninterruptible I/O", "Z": "process exited", "R": "process running but silent",
              "S": "process sleeping, blocked on something other than its peers"}
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "process state unknown"
    return states.get(state, f"process state {state}")
