"""Ending a process group that a test started (`start_new_session=True`) without killing
another's: a group's number is its leader's pid, and once the leader is reaped that number may
lead the group of a process started since (pids wrap at 32768 here). The leader is therefore
reaped only after its group's last signal, and a leader already reaped is left alone. And the
processes left in a session (a coordinator's, with its Ray's), waited on to end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from contextlib import suppress
from typing import Any


def end_group(process: subprocess.Popen[Any], grace_s: float = 0.0) -> None:
    """SIGKILL to the group `process` leads (SIGTERM first when `grace_s` gives it time to
    stop), then the leader reaped."""
    end_groups([process], grace_s)


def end_groups(processes: Iterable[subprocess.Popen[Any]], grace_s: float = 0.0) -> None:
    """`end_group` for several groups at once: one SIGTERM each, one grace for all."""
    # reaped already: their numbers may be other groups' by now
    leaders = [process for process in processes if process.returncode is None]
    if grace_s > 0:
        for process in leaders:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not all(map(exited, leaders)):
            time.sleep(0.05)
    for process in leaders:
        _signal_group(process, signal.SIGKILL)
    for process in leaders:
        process.wait(timeout=30)


def exited(process: subprocess.Popen[Any]) -> bool:
    """Whether the process has ended, left unreaped (its zombie keeps its number)."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _signal_group(process: subprocess.Popen[Any], signum: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def session_ends(session: int, within_s: float) -> bool:
    """Whether every process of the coordinator's session (its Ray's) ends within that time."""
    deadline = time.monotonic() + within_s
    while live_processes_of(session) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not live_processes_of(session)


def live_processes_of(session: int) -> list[str]:
    """The processes left in the coordinator's session (its Ray's), zombies aside."""
    listing = subprocess.run(
        ["ps", "-o", "pid=,stat=,args=", "-s", str(session)], capture_output=True, text=True
    )
    return [line for line in listing.stdout.splitlines() if line.split()[1:2] != ["Z"]]
