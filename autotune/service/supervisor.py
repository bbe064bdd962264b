"""The job runner processes of one `autotune serve`, supervised.

A thread of the serving process looks at its runners every second. A runner process that
ended (killed, crashed, or gone with its Ray node) is started again, after a pause that
grows while runners keep dying young, and the job it held goes back to the queue at once;
the next runner resumes its study. Running jobs whose lease expired (their runner, here or
on another machine, stopped renewing it) go back to the queue too.

On shutdown no runner is started again and each is asked to stop (SIGTERM: it stops
claiming, stops its study after the running trials and gives its job back). A runner still
running after the grace period, or at a second signal, is killed and its job given back.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.service.jobs import JobStore
from autotune.service.runner import runner_owner
from autotune.service.settings import ServiceSettings

log = logging.getLogger("autotune.supervisor")

CHECK_EVERY_S = 1.0
# A runner that dies sooner than this after its start is replaced after a pause that
# doubles with each such death in a row (1 s, 2 s, 4 s, ...), at most RESTART_PAUSE_MAX_S.
YOUNG_S = 30.0
RESTART_PAUSE_MAX_S = 60.0

# Starts runner `index` in a process of its own, claiming jobs with this token in its lease
# owner name (`runner_owner`); returns the started multiprocessing.Process.
StartRunner = Callable[[ServiceSettings, int, str], Any]


@dataclass(frozen=True)
class RunnerCounts:
    expected: int
    alive: int
    restarts: int


@dataclass
class RunnerSlot:
    """One runner the supervisor keeps alive: its process now, and the lease owner it
    claims jobs as."""

    index: int
    process: Any = None
    owner: str = ""
    started_at: float = 0.0
    young_deaths: int = 0
    restart_at: float = 0.0

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()


class Supervisor:
    def __init__(
        self,
        settings: ServiceSettings,
        store: JobStore,
        count: int,
        start: StartRunner,
        check_every_s: float = CHECK_EVERY_S,
    ) -> None:
        self.settings = settings
        self.store = store
        self.restarts = 0
        self._start_process = start
        self._check_every_s = check_every_s
        self.slots = [RunnerSlot(index) for index in range(count)]
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            for slot in self.slots:
                self._launch(slot)
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()

    def counts(self) -> RunnerCounts:
        with self._lock:
            alive = sum(slot.alive() for slot in self.slots)
            return RunnerCounts(len(self.slots), alive, self.restarts)

    def hurry(self) -> None:
        """Kill the runners that are still stopping, now (a second signal)."""
        self._hurry.set()

    def check(self) -> None:
        """One look: replace the runners that ended, give back what nobody works on."""
        with self._lock:
            for slot in self.slots:
                if self._stopping.is_set():
                    return
                if slot.process is not None and not slot.process.is_alive():
                    self._bury(slot)
                if slot.process is None and time.monotonic() >= slot.restart_at:
                    self._launch(slot)
                    self.restarts += 1
        for job_id in self.store.requeue_expired():
            log.warning("job %s: its lease expired (its runner stopped); back in the queue", job_id)

    def stop(self, grace_s: float | None = None) -> None:
        """Stop every runner: asked first, killed after `grace_s` (settings by default)."""
        grace_s = self.settings.shutdown_grace_s if grace_s is None else grace_s
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            slots = [slot for slot in self.slots if slot.process is not None]
        for slot in slots:
            if slot.process.is_alive():
                slot.process.terminate()  # SIGTERM: the runner hands its job back
        deadline = time.monotonic() + grace_s
        while any(s.alive() for s in slots) and time.monotonic() < deadline:
            if self._hurry.wait(0.1):
                break
        for slot in slots:
            if slot.alive():
                log.warning("job runner %d did not stop in time; killing it", slot.index)
                slot.process.kill()
            slot.process.join()
            self._give_back(slot)

    def _watch(self) -> None:
        while not self._stopping.wait(self._check_every_s):
            try:
                self.check()
            except Exception:
                log.exception("supervising the job runners failed; trying again")

    def _launch(self, slot: RunnerSlot) -> None:
        token = uuid.uuid4().hex[:8]
        slot.process = self._start_process(self.settings, slot.index, token)
        slot.owner = runner_owner(slot.process.pid, token)
        slot.started_at = time.monotonic()

    def _bury(self, slot: RunnerSlot) -> None:
        """A runner that ended: its job back to the queue, its replacement scheduled."""
        process = slot.process
        process.join()
        lived = time.monotonic() - slot.started_at
        slot.young_deaths = slot.young_deaths + 1 if lived < YOUNG_S else 0
        pause = 0.0 if slot.young_deaths == 0 else 2.0 ** (slot.young_deaths - 1)
        pause = min(pause, RESTART_PAUSE_MAX_S)
        log.warning(
            "job runner %d (pid %s) ended with exit code %s after %.0f s; next one in %g s",
            slot.index,
            process.pid,
            process.exitcode,
            lived,
            pause,
        )
        self._give_back(slot)
        slot.process = None
        slot.restart_at = time.monotonic() + pause

    def _give_back(self, slot: RunnerSlot) -> None:
        try:
            for job_id in self.store.release_owner(slot.owner):
                log.warning("job %s: its runner ended; back in the queue", job_id)
        except Exception:  # the lease expires; the job is given back then
            log.exception("giving back the job of job runner %d failed", slot.index)
