"""What the service tests share: fresh PostgreSQL databases, settings under tmp_path, a
small digits request, runner processes that are always cleaned up, and trial nodes whose
hardware a test replaces under a watch it makes due at once."""

from __future__ import annotations

import functools
import multiprocessing
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import update

from autotune.core.contract import NodeInfo, NodeKind
from autotune.service.db import Database, Watch
from autotune.service.jobs import JobStore
from autotune.service.server import run_runner
from autotune.service.settings import ServiceSettings
from autotune.service.tokens import Principal, authenticate, create_token
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR

PROFILES = SPACES_DIR / "profiles"

FAST = {
    "warmup_iters": 2,
    "min_iters": 10,
    "max_iters": 50,
    "min_seconds": 0.0,
    "max_seconds": 0.3,
    "settle_tolerance": None,
    "energy_window_s": 0.05,
    "contention": "warn",  # the test's own processes load the machine: measure, don't wait
    "contention_window_s": 0.0,
}


def service_request(name: str = "digits-svc", trials: int = 3, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "name": name,
        "model": {"entry_point": "experiments.digits.model:build_model"},
        "data": {"entry_point": "experiments.digits.model:eval_data"},
        "constraints": {"max_accuracy_drop": 0.02},
        "search_space": "quick-cpu.yaml",
        "budget": {"trials": trials},
        "measurement": FAST,
        "validation": {"neighbours": 0, "rounds": 6, "round_seconds": 0.05},
    }
    request.update(overrides)
    return request


def settings_for(
    tmp_path: Path, db: str, storage: str, tracking: str, **kw: Any
) -> ServiceSettings:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    defaults: dict[str, Any] = {
        "db": db,
        "storage": storage,
        "tracking_uri": tracking,
        "data_dir": tmp_path / "data",
        "models_root": models,
        "trusted_modules": ("experiments.digits",),
        "executor": "inprocess",
        "lease_s": 3.0,
        "poll_s": 0.2,
        "stale_after_s": 10.0,
    }
    defaults.update(kw)
    return ServiceSettings(**defaults)


@functools.cache
def _migrated_service_db() -> bytes:
    """An empty service database at the newest schema, as file contents, made once a process:
    creating the tables costs a test some 50 ms, a copy of the file nothing."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "service.db"
        Database(f"sqlite:///{path}").close()
        return path.read_bytes()


def sqlite_settings(tmp_path: Path, **kw: Any) -> ServiceSettings:
    """Settings over SQLite files in `tmp_path`; the service database is there already,
    migrated (opening it migrates it again, a no-op at the newest revision)."""
    service_db = tmp_path / "service.db"
    if not service_db.exists():
        service_db.write_bytes(_migrated_service_db())
    return settings_for(
        tmp_path,
        f"sqlite:///{service_db}",
        f"sqlite:///{tmp_path / 'studies.db'}",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        **kw,
    )


def principal(db: Database, name: str = "alice", team: str | None = None) -> Principal:
    return authenticate(db, "Bearer " + create_token(db, name, team))


@contextmanager
def runner_processes(settings: ServiceSettings, count: int) -> Iterator[list[Any]]:
    """Job runner processes, as `autotune serve` starts them; killed at the end."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=run_runner, args=(settings,)) for _ in range(count)]
    for process in processes:
        process.start()
    try:
        yield processes
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(30)


def wait_for(
    condition: Callable[[], Any],
    deadline_s: float,
    what: str,
    describe: Callable[[], Any] | None = None,
) -> Any:
    end = time.monotonic() + deadline_s
    pause = 0.01  # doubling up to 0.2 s: quick conditions are seen at once, slow ones polled
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(pause)
        pause = min(2 * pause, 0.2)
    seen = f"; last seen: {describe()}" if describe is not None else ""
    raise AssertionError(f"timed out after {deadline_s:.0f}s waiting for {what}{seen}")


def job_states(store: JobStore, ids: list[str]) -> dict[str, str]:
    return {job_id: store.get_any(job_id).state for job_id in ids}  # type: ignore[union-attr]


def due_now(db: Database, watch_id: str) -> None:
    """Make the watch due at once: a test ticks without waiting for its schedule."""
    with db.transaction() as session:
        session.execute(update(Watch).where(Watch.id == watch_id).values(next_run_at=0.0))


class ReplacedNodes:
    """An executor's report of its nodes, whose hardware the test replaces: `kinds` is all
    of the executor the service's hardware survey asks."""

    def __init__(self) -> None:
        self.profile = load_profile(PROFILES / "a100.json")
        self.surveys = 0

    def kinds(self) -> list[NodeKind]:
        self.surveys += 1
        node = NodeInfo(node_id="n1", hostname="gpu-1", cpus=8, gpus=1, slots=1)
        return [NodeKind(profile=self.profile, nodes=[node])]
