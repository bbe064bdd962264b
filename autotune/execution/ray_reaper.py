"""A Ray started here ends with the process that started it, even one that is killed (SIGKILL,
the OOM killer). Ray's own processes share the fate of theirs only in part: its dashboard
and runtime-env agents, children of the raylet, outlive a killed coordinator by a minute or
more (they spend it trying to tell the dead cluster that its raylet died), some 185 MB.

The reaper is a small process of its own (`python -m autotune.execution.ray_reaper`),
given the processes `ray.init` started (the children the coordinator did not have before):
it learns their descendants every `REFRESH_S`, and when the coordinator is gone (the pipe it
holds ends) kills those still running. A coordinator that stops Ray itself closes the pipe
after `ray.shutdown`, and the reaper kills only what Ray left behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys

REFRESH_S = 1.0


def children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children()}


class Reaper:
    """The reaper of the Ray processes in `roots` (and theirs): `close` it after
    `ray.shutdown`."""

    def __init__(self, roots: set[int]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, *map(str, sorted(roots))],
            stdin=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C to the terminal's group is not for it
        )

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait()


def reap(roots: set[int]) -> None:
    """Follow the roots and their descendants until stdin ends, then kill them."""
    import psutil

    started: dict[int, psutil.Process] = {}
    for pid in roots:
        with contextlib.suppress(psutil.NoSuchProcess):
            started[pid] = psutil.Process(pid)
    while True:
        for pid, process in list(started.items()):
            try:
                for child in process.children(recursive=True):
                    started.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                del started[pid]  # ended (a trial's worker, say): nothing to kill
        readable, _, _ = select.select([sys.stdin.buffer], [], [], REFRESH_S)
        if readable and not os.read(sys.stdin.fileno(), 1):
            break
    for process in started.values():
        # psutil checks that the pid still names the process it saw
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.kill()


if __name__ == "__main__":
    reap({int(pid) for pid in sys.argv[1:]})
