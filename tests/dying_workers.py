"""A Ray trial worker whose process is killed (SIGKILL, as the kernel's OOM killer or Ray's
memory monitor kills one) when a call arrives that the test armed: touching `armed/inspect`
kills the next worker that is asked to inspect, `armed/run` the next one asked to run a
trial. Each armed file kills one worker, whichever process gets the call."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from workers.actor import TrialWorker


def die_if_armed(armed: Path) -> None:
    try:
        armed.unlink()  # only one process succeeds
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def dying_worker(armed: Path) -> type[TrialWorker]:
    """A TrialWorker class (defined here, so Ray ships it by value with `armed` in it)."""

    class DyingWorker(TrialWorker):
        def inspect(self, workload: Any, blobs: Any = None) -> Any:
            die_if_armed(armed / "inspect")
            return TrialWorker.inspect(self, workload, blobs)

        def run(self, spec: Any, blobs: Any = None) -> Any:
            die_if_armed(armed / "run")
            return TrialWorker.run(self, spec, blobs)

    return DyingWorker
