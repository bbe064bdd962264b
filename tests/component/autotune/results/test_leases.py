"""The study and schema locks: a file lock beside a SQLite database, an advisory lock on
PostgreSQL."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from autotune.results.leases import Heartbeat, lock_engine, study_lock
from tests.postgres_cluster import PrivateCluster


def test_a_sqlite_study_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait()
        with study_lock(url, "s"):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    with study_lock(url, "s"):
        inside.set()
        thread.join(timeout=0.2)  # blocked on the lock: still running
        assert thread.is_alive()
        order.append("first")
    thread.join()
    assert order == ["first", "second"]


@pytest.mark.integration
def test_a_study_lock_held_across_a_server_restart_is_left_without_error(
    private_postgres: PrivateCluster,
) -> None:
    """The restart ended the session that held the advisory lock, and the lock with it."""
    url = private_postgres.url()
    engine = lock_engine(url)
    try:
        with study_lock(url, "s", engine):
            private_postgres.restart()
        with study_lock(url, "s", engine):  # taken again on a fresh connection
            pass
    finally:
        engine.dispose()


def test_a_failing_heartbeat_is_logged_once_and_its_recovery_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    beats: list[int] = []

    def beat() -> None:
        beats.append(1)
        if 2 <= len(beats) <= 5:
            raise ConnectionError("the database is restarting")

    with caplog.at_level(logging.INFO, logger="autotune.results.leases"), Heartbeat(beat, 0.01):
        deadline = time.monotonic() + 10
        while len(beats) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)

    messages = [r.getMessage() for r in caplog.records]
    assert len(beats) >= 8
    assert sum("heartbeat failed" in m for m in messages) == 1
    assert sum("heartbeat is written again" in m for m in messages) == 1
    failed = next(r for r in caplog.records if "heartbeat failed" in r.getMessage())
    assert failed.levelno == logging.WARNING and failed.exc_info is not None
