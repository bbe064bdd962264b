"""Who is running which trial, and what to do about trials whose coordinator died.

Optuna's heartbeat does not cover ask/tell, so autotune keeps its own: every coordinator
has an `Owner` record in the study's system attributes, refreshed by a heartbeat thread,
and tags each trial it asks for with its owner id. A RUNNING trial whose owner is dead
(same host and its process is gone, or its heartbeat is stale) is lost: the coordinator
that notices records it as failed and enqueues its configuration again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.errors import AutotuneError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Owner:
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    # whether its trials run inside its own process (they die with it)
    in_process: bool = False

    def record(self) -> dict[str, Any]:
        seen = time.time()
        return {"host": self.host, "pid": self.pid, "seen": seen, "in_process": self.in_process}


def owner_is_dead(record: dict[str, Any] | None, stale_after_s: float) -> bool:
    """Dead when its process is gone (on this host), or its heartbeat is older than the bound."""
    if record is None:
        return True
    if record.get("host") == socket.gethostname() and not _pid_alive(int(record["pid"])):
        return True
    return time.time() - float(record["seen"]) > stale_after_s


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Heartbeat:
    """Calls `beat` (which refreshes this coordinator's owner record) every `interval_s`
    seconds while the block runs."""

    def __init__(self, beat: Callable[[], None], interval_s: float = 5.0) -> None:
        self._beat_once = beat
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="autotune-heartbeat")

    def __enter__(self) -> Heartbeat:
        self._beat_once()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        failing = False
        while not self._stop.wait(self._interval_s):
            try:
                self._beat_once()
            except Exception:  # the database may be restarting: the next beat retries
                if not failing:
                    logger.warning(
                        "the coordinator's heartbeat failed; retrying every %g s (other "
                        "coordinators reap its running trials if it stays silent)",
                        self._interval_s,
                        exc_info=True,
                    )
                failing = True
                continue
            if failing:
                logger.info("the coordinator's heartbeat is written again")
            failing = False


@contextmanager
def study_lock(storage_url: str, study_name: str, engine: Any = None) -> Iterator[None]:
    """Serialize the check-then-ask of coordinators sharing a study: a PostgreSQL advisory
    lock (taken on `engine`'s connections where given, kept between locks by a caller that
    locks often), or a file lock next to a SQLite database."""
    if storage_url.startswith("sqlite"):
        with _file_lock(storage_url):
            yield
    elif storage_url.startswith("postgresql"):
        with _advisory_lock(storage_url, study_name, engine):
            yield
    else:
        raise AutotuneError(
            f"coordinators can share a study only on PostgreSQL or SQLite, not {storage_url!r}"
        )


@contextmanager
def schema_lock(storage_url: str) -> Iterator[None]:
    """Serialize the first use of new databases (Optuna's and MLflow's Alembic migrations
    race otherwise) among coordinators sharing a storage: a PostgreSQL advisory lock, or a
    file lock beside a SQLite database (not the study lock's: the two nest)."""
    if storage_url.startswith("postgresql"):
        with _advisory_lock(storage_url, "autotune-schemas"):
            yield
    elif storage_url.startswith("sqlite"):
        with _file_lock(storage_url, ".schema.lock"):
            yield
    else:
        yield


@contextmanager
def _file_lock(storage_url: str, suffix: str = ".lock") -> Iterator[None]:
    database = storage_url.split(":///", 1)[1] if ":///" in storage_url else ""
    if not database or database == ":memory:":
        yield
        return
    with open(Path(database + suffix), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_ENGINES: dict[str, Any] = {}


@contextmanager
def _advisory_lock(storage_url: str, study_name: str, engine: Any = None) -> Iterator[None]:
    import zlib

    import sqlalchemy

    engine = engine or _ENGINES.get(storage_url)
    if engine is None:
        # No pool: a lock's connection lives only while the lock is held.
        engine = sqlalchemy.create_engine(storage_url, poolclass=sqlalchemy.pool.NullPool)
        _ENGINES[storage_url] = engine
    key = zlib.crc32(f"autotune:{study_name}".encode())
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            _unlock(connection, key)


def _unlock(connection: Any, key: int) -> None:
    import sqlalchemy

    try:
        connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        connection.commit()
    except sqlalchemy.exc.DBAPIError:
        # The server ended the session (a restart, say), and its advisory locks with it; a
        # session still alive is closed, which releases them too.
        connection.invalidate()


def lock_engine(storage_url: str) -> Any:
    """A pooled engine for the study locks of one long-lived caller (its owner disposes of
    it); None where the lock is not a database's."""
    if not storage_url.startswith("postgresql"):
        return None
    import sqlalchemy

    return sqlalchemy.create_engine(storage_url, pool_size=1, max_overflow=2, pool_pre_ping=True)
