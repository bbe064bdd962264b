"""Shared fixtures: a small, fast digits request that writes only under tmp_path."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent

# The PostgreSQL server the integration tests make their databases on.
ADMIN_URL = os.environ.get(
    "AUTOTUNE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

FAST_MEASUREMENT = {
    "warmup_iters": 2,
    "min_iters": 10,
    "max_iters": 200,
    "min_seconds": 0.02,
    "max_seconds": 0.3,
    # measured at once and marked when busy: tests must not wait for a quiet machine
    "contention": "warn",
}
# The fewest rounds whose paired ratios have a 95% interval, in short blocks.
FAST_VALIDATION = {"rounds": 6, "round_seconds": 0.05}


def digits_request(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "name": "digits-test",
        "model": {"entry_point": "experiments.digits.model:build_model"},
        "data": {"entry_point": "experiments.digits.model:eval_data"},
        "constraints": {"max_accuracy_drop": 0.01},
        "search_space": "cpu.yaml",
        "budget": {"trials": 6},
        "measurement": FAST_MEASUREMENT,
        "validation": FAST_VALIDATION,
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "tests"},
        "storage": f"sqlite:///{tmp_path / 'study.db'}",
    }
    request.update(overrides)
    return request


@pytest.fixture
def write_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a digits request file; run from a tmp dir so nothing lands in the repo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO))

    def write(**overrides: Any) -> Path:
        path = tmp_path / "request.yaml"
        path.write_text(yaml.safe_dump(digits_request(tmp_path, **overrides)))
        return path

    return write


@contextmanager
def postgres_databases(count: int, prefix: str = "autotune_it") -> Iterator[list[str]]:
    """Fresh PostgreSQL databases (the job store, Optuna and MLflow each need their own),
    dropped afterwards."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    names = [f"{prefix}_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    try:
        with engine.connect() as connection:
            for name in names:
                connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    except sqlalchemy.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {ADMIN_URL} is needed for this test: {exc}")
    base = ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield [f"{base}/{name}" for name in names]
    finally:
        with engine.connect() as connection:
            for name in names:
                connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        engine.dispose()


def stored_trials(storage: str, study: str) -> list[Any]:
    """A stored study's trials, read with a connection that is closed afterwards (polling
    loops that leave engines to the garbage collector exhaust PostgreSQL's clients)."""
    from autotune.coordinator import opened_study

    with opened_study(study, storage, "study") as loaded:
        return loaded.trials
