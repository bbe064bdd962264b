"""The service database: tokens, jobs, watches and their checks (SQLAlchemy 2), migrated by Alembic.

SQLite is the single-machine default; PostgreSQL is what several API servers and runners
share. Times that leases and schedules compare are epoch seconds of the writer's clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Boolean, Engine, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from autotune.results.leases import study_lock

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "autotune_service_version"


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    team: Mapped[str | None] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class Watch(Base):
    __tablename__ = "watches"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("tokens.id"))
    team: Mapped[str | None] = mapped_column(String(100))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    base_dir: Mapped[str] = mapped_column(Text)
    every_s: Mapped[float | None] = mapped_column(Float)
    cron: Mapped[str | None] = mapped_column(String(100))
    next_run_at: Mapped[float] = mapped_column(Float, index=True)
    last_model_fingerprint: Mapped[str | None] = mapped_column(String(200))
    last_hardware_fingerprint: Mapped[str | None] = mapped_column(String(64))
    last_checked_at: Mapped[float | None] = mapped_column(Float)
    last_job_id: Mapped[str | None] = mapped_column(String(32))
    retune_trials: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    # Where the end of each of its jobs is posted (http or https), if anywhere.
    notify_url: Mapped[str | None] = mapped_column(Text)


class WatchCheck(Base):
    """One check of a watch: 'first' (the model and hardware recorded), 'unchanged',
    'changed' (`change` says what), or 'error' (`note` says why it could not tell)."""

    __tablename__ = "watch_checks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    watch_id: Mapped[str] = mapped_column(ForeignKey("watches.id"), index=True)
    checked_at: Mapped[float] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(String(16))
    change: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    job_id: Mapped[str | None] = mapped_column(String(32))
    note: Mapped[str | None] = mapped_column(Text)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("tokens.id"))
    team: Mapped[str | None] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16), index=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    base_dir: Mapped[str] = mapped_column(Text)
    model_source: Mapped[dict[str, Any]] = mapped_column(JSON)
    model_sha256: Mapped[str] = mapped_column(String(200))
    hardware_fingerprint: Mapped[str] = mapped_column(String(64))
    dedupe_key: Mapped[str] = mapped_column(String(64), index=True)
    # Equal to dedupe_key while the job can still answer an identical submission; NULL once
    # it failed or was cancelled (NULLs never collide in a unique index).
    active_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    study_name: Mapped[str] = mapped_column(String(100))
    watch_id: Mapped[str | None] = mapped_column(ForeignKey("watches.id"))
    warm_start_from: Mapped[str | None] = mapped_column(String(32))
    # A watch's re-tune: the job it re-tunes ("of") and what changed ("model", "hardware").
    retune: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    budget_trials: Mapped[int | None] = mapped_column(Integer)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    best: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    registered_model: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class Database:
    """An engine on the service database, migrated to the newest schema on open; with
    `read_only`, one that must exist already and is neither created nor migrated."""

    def __init__(self, url: str, read_only: bool = False, field: str = "db") -> None:
        import sqlalchemy

        if read_only:
            from autotune.results.databases import require_existing

            require_existing(url, field, frozenset({VERSION_TABLE}), "the service's tables")

        self.url = url
        self.is_postgres = url.startswith("postgresql")
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if url.startswith("sqlite"):
            # Runner threads and the API share one file: wait for its lock instead of failing.
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        if self.is_postgres:
            # Every statement here is short: a lock held longer is a bug, reported, not awaited.
            kwargs["connect_args"] = {"options": "-c lock_timeout=60000"}
        self.engine: Engine = sqlalchemy.create_engine(url, **kwargs)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if not read_only:
            migrate(url)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    def close(self) -> None:
        self.engine.dispose()


def migrate(url: str) -> None:
    """Bring the schema to the newest Alembic revision; processes starting together take
    turns (a PostgreSQL advisory lock, or a file lock beside a SQLite database)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["url"] = url
    with study_lock(url, "autotune-service-migrations"):
        command.upgrade(config, "head")


def now() -> float:
    return time.time()
