"""A Ray started here ends with the process that started it, even one that is killed (SIGKILL,
the OOM killer). Ray's own processes share the fate of theirs only in part: its dashboard
and runtime-env agents, children of the raylet, outlive a killed coordinator by a minute or
more (they spend it trying to tell the dead cluster that its raylet died), some 185 MB.

The reaper is a small process of its own (`python -m autotune.execution.ray_reaper`),
started before `ray.init` and then told the processes `ray.init` started (the children the
coordinator did not have before): it learns their descendants every `REFRESH_S`, and when
the coordinator is gone (the pipe it holds ends) kills those still running. A coordinator
that stops Ray itself closes the pipe after `ray.shutdown`, and the reaper kills only what
Ray left behind.

The raylet dies with the coordinator (Ray makes the processes `ray.init` starts share its
fate), which leaves its agents to init: a coordinator killed inside `ray.init`, or before the
reaper has seen the agents, would leave them running. So the reaper also kills the strays of
the coordinator's process group: the processes that began after the reaper and that no older
process of the group parents (a live coordinator's own children are its). The group's leader
and what it parents are never strays: once the coordinator is dead, its number may lead the
group of a process started since (pids wrap), which is not ours to kill.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

REFRESH_S = 1.0
# What `Reaper.close` says before the pipe ends: the coordinator lives on.
CLOSING = b"closing"
# How long a dying coordinator may take to hand its children to another parent.
ORPHANING_S = 5.0
# Passes over the process table after the pipe ends: a raylet killed in the first cannot start
# anything the second does not see.
SWEEPS = 3


def children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children()}


class Reaper:
    """The reaper of a local Ray: made before `ray.init`, told the processes it started
    (`follow`), and `close`d after `ray.shutdown`."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(os.getpgid(0))],
            stdin=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C to the terminal's group is not for it
        )

    def follow(self, roots: set[int]) -> None:
        """Kill these processes too, and their descendants, wherever they are."""
        self._tell(" ".join(map(str, sorted(roots))).encode())

    def close(self) -> None:
        self._tell(CLOSING)
        if self._process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self._process.stdin.close()
        self._process.wait()

    def _tell(self, line: bytes) -> None:
        if self._process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # the reaper is gone: nothing to tell
                self._process.stdin.write(line + b"\n")
                self._process.stdin.flush()


def reap(group: int) -> None:
    """Follow the roots that stdin names and their descendants until stdin ends, then kill
    them and the strays of the coordinator's process `group` that began after the reaper."""
    import psutil

    since = psutil.Process().create_time()  # the clock the other processes' times are read by
    coordinator = os.getppid()
    started: dict[int, psutil.Process] = {}
    closing = False
    told = b""
    while True:
        for pid, process in list(started.items()):
            try:
                for child in process.children(recursive=True):
                    started.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                del started[pid]  # ended (a trial's worker, say): nothing to kill
        readable, _, _ = select.select([sys.stdin.buffer], [], [], REFRESH_S)
        if not readable:
            continue
        chunk = os.read(sys.stdin.fileno(), 4096)
        if not chunk:
            break
        told += chunk
        *lines, told = told.split(b"\n")
        for line in lines:
            closing = closing or line == CLOSING
            _follow(started, line)
    _kill(started.values())
    if not closing:
        _until_orphaned(coordinator)
    for _ in range(SWEEPS):
        _kill(strays(group, since))


def _follow(started: dict[int, psutil.Process], line: bytes) -> None:
    """Add the processes a line of pids names (the reaper aside: made before `ray.init`, it is
    one of the coordinator's new children too)."""
    import psutil

    for pid in (int(word) for word in line.split() if word.isdigit()):
        if pid != os.getpid():
            with contextlib.suppress(psutil.NoSuchProcess):
                started.setdefault(pid, psutil.Process(pid))


def _until_orphaned(coordinator: int) -> None:
    """Wait until the coordinator, whose pipe ended as it died, has given its children to
    another parent (this one among them): until then they still look like its own."""
    deadline = time.monotonic() + ORPHANING_S
    while os.getppid() == coordinator and time.monotonic() < deadline:
        time.sleep(0.01)


def strays(group: int, since: float) -> list[psutil.Process]:
    """The live processes of process group `group` that began at `since` or later and that
    neither the group's leader nor a process of the group older than that parents (the reaper
    and the leader aside)."""
    import psutil

    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):  # OSError: gone before getpgid
            if (
                process.pid not in (os.getpid(), group)
                and os.getpgid(process.pid) == group
                and process.create_time() >= since
                and process.status() != psutil.STATUS_ZOMBIE
                and not _parented(process, group, since)
            ):
                found.append(process)
    return found


def _parented(process: psutil.Process, group: int, since: float) -> bool:
    """Whether the group's leader, or a process of `group` older than `since`, is among the
    process's ancestors (reached through the group)."""
    parent = process.parent()
    while parent is not None and os.getpgid(parent.pid) == group:
        if parent.pid == group or parent.create_time() < since:
            return True
        parent = parent.parent()
    return False


def _kill(processes: Iterable[psutil.Process]) -> None:
    import psutil

    for process in processes:
        # psutil checks that the pid still names the process it saw
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.kill()


if __name__ == "__main__":
    reap(int(sys.argv[1]))
