"""`autotune serve`: the REST API, job runners and the watch scheduler in one command.

Each job runner is a process of its own: a job's Ray runtime is per process, and a runner
that crashes takes only its own job down (the job's lease expires and another runner
resumes it). The API and the scheduler share the main process.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from typing import Any

from autotune.service.db import Database
from autotune.service.settings import ServiceSettings

log = logging.getLogger("autotune.server")


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
    processes = [_start_runner(settings, index) for index in range(runners)]
    ticker = _start_scheduler(db, settings) if scheduler else None
    try:
        if api:
            _serve_api(db, settings, host, port)
        else:
            _wait_for_signal()
    finally:
        if ticker is not None:
            ticker.stopped.set()
        for process in processes:
            process.terminate()  # SIGTERM: the runner hands its job back to the queue
        for process in processes:
            process.join()
        db.close()


def run_runner(settings: ServiceSettings) -> None:
    """One runner, until SIGTERM or SIGINT; the job it holds goes back to the queue."""
    from autotune.service.runner import JobRunner

    _configure_logging()
    runner = JobRunner(Database(settings.db), settings)

    def stop(signum: int, frame: Any) -> None:
        runner.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run_forever()


def _start_runner(settings: ServiceSettings, index: int) -> Any:
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=run_runner, args=(settings,), name=f"runner-{index}")
    process.start()
    return process


def _start_scheduler(db: Database, settings: ServiceSettings) -> Any:
    from autotune.service.watches import Scheduler

    ticker = Scheduler(db, settings)
    threading.Thread(target=ticker.run_forever, name="scheduler", daemon=True).start()
    return ticker


def _serve_api(db: Database, settings: ServiceSettings, host: str, port: int) -> None:
    import uvicorn

    from autotune.service.api import create_app

    uvicorn.run(create_app(settings, db), host=host, port=port, log_level="info")


def _wait_for_signal() -> None:
    done = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    done.wait()
