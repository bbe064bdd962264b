"""`autotune serve`: the REST API, job runners and the watch scheduler in one command.

Each job runner is a process of its own: a job's Ray runtime is per process, and a runner
that crashes takes only its own job down. The main process supervises them
(`autotune.service.supervisor`): a runner that ended is replaced and its job goes back to
the queue, where the next runner resumes its study. The API and the scheduler share the
main process. SIGTERM or SIGINT stops the API, then the runners (each gives its job back
after its running trials, or is killed after the grace period), then exits 0; a second
signal kills the runners that are still stopping. A runner whose `serve` is gone (killed,
crashed) gives its job back and exits at once: none works the queue unsupervised.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.settings import ServiceSettings
from autotune.service.supervisor import Supervisor

if TYPE_CHECKING:
    from autotune.service.runner import JobRunner

log = logging.getLogger("autotune.server")

# How often a runner asks whether its Ray node is alive, and its exit code when it is not.
RAY_NODE_CHECK_S = 5.0
RAY_NODE_DIED_EXIT = 3
# A runner whose serve is gone: how long it tries to give its job back, and its exit code.
ORPHAN_GIVE_BACK_S = 2.0
ORPHANED_EXIT = 4


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for chatty in ("alembic", "mlflow", "optuna"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def serve(
    settings: ServiceSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    api: bool = True,
    runners: int = 1,
    scheduler: bool = True,
) -> None:
    _configure_logging()
    db = Database(settings.db)  # migrates before anything else starts
    supervisor = Supervisor(settings, JobStore(db), runners, _start_runner) if runners else None
    signals = _Signals(supervisor)
    ticker = None
    try:
        if supervisor is not None:
            supervisor.start()
        ticker = _start_scheduler(db, settings) if scheduler else None
        if api and not signals.received.is_set():
            _serve_api(db, settings, host, port, supervisor)
        else:
            signals.received.wait()
    finally:
        if ticker is not None:
            ticker.stopped.set()
        if supervisor is not None:
            log.info("stopping the job runners")
            supervisor.stop()
        db.close()
        log.info("stopped")


def run_runner(settings: ServiceSettings, token: str | None = None) -> None:
    """One runner, until SIGTERM or SIGINT; the job it holds goes back to the queue."""
    from autotune.service.runner import JobRunner

    _configure_logging()
    runner = JobRunner(Database(settings.db), settings, token)

    def stop(signum: int, frame: Any) -> None:
        runner.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _exit_with_the_parent(runner)
    _exit_when_the_ray_node_dies()
    runner.run_forever()


def _exit_with_the_parent(runner: JobRunner) -> None:
    """A runner started by `serve` ends with it, even with a `serve` that was killed: the
    pipe that multiprocessing keeps open in the parent (with the runner's Process object)
    closes when the parent ends. A parent-death signal would come when the parent's
    *thread* that started the runner ends instead: the supervisor's, on an orderly stop,
    before the runner could drain. The runner gives its job back to the queue, where
    another serve resumes its study, and exits at once; the Ray it started ends with it
    (`autotune.execution.ray_reaper`)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        log.error("serve (pid %s) is gone; this runner gives its job back and exits", parent.pid)
        giving_back = threading.Thread(target=runner.give_back, daemon=True)
        giving_back.start()
        giving_back.join(ORPHAN_GIVE_BACK_S)  # else its lease expires, and the job comes back
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _exit_when_the_ray_node_dies(every_s: float = RAY_NODE_CHECK_S) -> None:
    """Ray does not end a driver whose node died; its calls fail or hang from then on. The
    runner process exits instead, so that its supervisor starts another (with a Ray of its
    own) and gives the job back to the queue."""

    def watch() -> None:
        while True:
            time.sleep(every_s)
            if not _ray_node_alive():
                log.error("this runner's Ray node died; the runner exits to be replaced")
                os._exit(RAY_NODE_DIED_EXIT)

    threading.Thread(target=watch, name="ray-node-watch", daemon=True).start()


def _ray_node_alive() -> bool:
    """False once the Ray cluster reports this process's node dead; True without Ray, or
    when the cluster cannot be asked (a job starting or ending its Ray, say)."""
    ray = sys.modules.get("ray")
    try:  # a module being imported by another thread has no is_initialized yet
        if ray is None or not ray.is_initialized():
            return True
        node = ray.get_runtime_context().get_node_id()
        return any(n["NodeID"] == node and n["Alive"] for n in ray.nodes())
    except Exception:
        return True


def _start_runner(settings: ServiceSettings, index: int, token: str) -> Any:
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=run_runner, args=(settings, token), name=f"runner-{index}")
    process.start()
    return process


class _Signals:
    """SIGTERM and SIGINT end `serve` through its clean-up; a second one hurries it.

    Installed before the API starts: uvicorn catches the first signal itself, shuts down,
    puts these handlers back and raises the signal again, which lands here (with the
    default handlers the process would die there, leaving its runners behind)."""

    def __init__(self, supervisor: Supervisor | None) -> None:
        self.received = threading.Event()
        self.supervisor = supervisor
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received.is_set() and self.supervisor is not None:
            self.supervisor.hurry()
        self.received.set()


def _start_scheduler(db: Database, settings: ServiceSettings) -> Any:
    from autotune.service.watches import Scheduler

    ticker = Scheduler(db, settings)
    threading.Thread(target=ticker.run_forever, name="scheduler", daemon=True).start()
    return ticker


def _serve_api(
    db: Database, settings: ServiceSettings, host: str, port: int, supervisor: Supervisor | None
) -> None:
    import uvicorn

    from autotune.service.api import create_app

    counts = supervisor.counts if supervisor is not None else None
    app = create_app(settings, db, runner_counts=counts)
    uvicorn.run(app, host=host, port=port, log_level="info")
