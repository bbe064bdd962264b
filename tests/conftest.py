"""Shared fixtures: a small, fast digits request that writes only under tmp_path."""

from __future__ import annotations

import functools
import gc
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import repo_writes
from tests.machine_share import machine_share
from tests.postgres_cluster import PrivateCluster, Unavailable, private_cluster

REPO = Path(__file__).resolve().parent.parent

# The data plane's fixtures (the digits workload, its ONNX export), for every tier's tests.
pytest_plugins = ["tests.workers_support"]

# The PostgreSQL server the integration tests make their databases on (one fresh database
# per test, dropped afterwards; the server itself is never stopped or reconfigured). Without
# it those tests skip, unless AUTOTUNE_TEST_REQUIRE_POSTGRES=1 (CI) makes that a failure.
ADMIN_URL = os.environ.get(
    "AUTOTUNE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


# Where pytest-xdist's workers keep the lock files of tests.machine_share: made by the
# controlling process, handed to each worker, removed when the run ends.
MACHINE_SHARE = "machine_share_dir"
_machine_share_dirs: list[tempfile.TemporaryDirectory[str]] = []


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller, for each worker it starts."""
    if not _machine_share_dirs:
        _machine_share_dirs.append(tempfile.TemporaryDirectory(prefix="pytest-machine-"))
    node.workerinput[MACHINE_SHARE] = _machine_share_dirs[0].name


def pytest_collection_finish(session: pytest.Session) -> None:
    # The modules and tests collected live until the run ends: the garbage collector need
    # not walk them again in each full collection (0.4-1 s a worker over a run).
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    while _machine_share_dirs:
        _machine_share_dirs.pop().cleanup()
    # The collection the interpreter makes of what the run left on its way out took each
    # process 1.5-2.5 s.
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """In a pytest-xdist worker, each test holds the machine shared with the other workers'
    tests, or alone where it is marked `exclusive` (tests.machine_share)."""
    directory = getattr(item.config, "workerinput", {}).get(MACHINE_SHARE)
    if directory is None:
        return (yield)
    with machine_share(Path(directory), item.get_closest_marker("exclusive") is not None):
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_into_the_repo(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Fails the session (an error at the last test's teardown) when files appeared in the
    clone: tests write only under their temporary directories."""
    try:  # Hypothesis keeps its files in ./.hypothesis unless told otherwise
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(_hypothesis_home(request.config, tmp_path_factory))
    except ImportError:
        pass
    before = repo_writes.snapshot(REPO)
    yield
    appeared = repo_writes.new_files(before, repo_writes.snapshot(REPO))
    if appeared:
        pytest.fail(repo_writes.describe(appeared), pytrace=False)


def _hypothesis_home(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's cache directory, where it is on: Hypothesis computes its table of the
    characters a codec can encode there once (seconds), not every run. The fuzz tests keep no
    example database, so nothing there changes what a run generates."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return tmp_path_factory.mktemp("hypothesis")
    return Path(cache.mkdir("hypothesis"))


# Measured at once and marked when busy: tests must not wait for a quiet machine, nor watch it
# after a trial has measured.
MEASURED_AT_ONCE = {"contention": "warn", "contention_window_s": 0.0}
FAST_MEASUREMENT = {
    "warmup_iters": 2,
    "min_iters": 10,
    "max_iters": 200,
    "min_seconds": 0.02,
    "max_seconds": 0.3,
    **MEASURED_AT_ONCE,
}
# Every trial times for 1.5 s or more, however fast its calls (no iteration cap ends it sooner,
# no short window screens it out): a signal or a kill sent while a trial runs lands inside it.
SLOW_MEASUREMENT = {
    "warmup_iters": 2,
    "min_iters": 10,
    "max_iters": 10_000_000,
    "min_seconds": 1.5,
    "max_seconds": 2.0,
    "screen_seconds": None,
    **MEASURED_AT_ONCE,
}
# The fewest rounds whose paired ratios have a 95% interval, in short blocks.
FAST_VALIDATION = {"rounds": 6, "round_seconds": 0.05}


def digits_request(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "name": "digits-test",
        "model": {"entry_point": "experiments.digits.model:build_model"},
        "data": {"entry_point": "experiments.digits.model:eval_data"},
        "constraints": {"max_accuracy_drop": 0.01},
        "search_space": "quick-cpu.yaml",
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


@pytest.fixture(scope="session")
def mlflow_store_template(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """An MLflow SQLite store with every schema migration applied and no experiment: a new
    store costs seconds of migrations, a copy of this one milliseconds. It is made once per
    MLflow version and kept in pytest's cache directory (once a session where that is off).
    The Default experiment is removed so that a copy creates it when first opened, with the
    artifact location a new store would get there."""
    import sqlite3

    import mlflow
    from mlflow.tracking import MlflowClient

    name = f"mlflow-store-{mlflow.__version__}"
    cache = getattr(request.config, "cache", None)
    directory = Path(cache.mkdir(name)) if cache is not None else tmp_path_factory.mktemp(name)
    path = directory / "mlflow.db"
    if path.exists():
        return path
    building = Path(tempfile.mkdtemp(dir=directory)) / "mlflow.db"
    MlflowClient(f"sqlite:///{building}").search_experiments()
    with closing(sqlite3.connect(building)) as connection:
        with connection:
            connection.execute("DELETE FROM experiments")
        # the file alone is copied: nothing may be left in a write-ahead journal beside it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.replace(building, path)  # whole or not at all, whichever worker finishes first
    shutil.rmtree(building.parent)
    return path


def copy_mlflow_store(template: Path, path: Path) -> str:
    """Put an empty, migrated MLflow SQLite store (a copy of `template`) at `path`; returns
    its tracking URI."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def new_mlflow_store(mlflow_store_template: Path) -> Callable[[Path], str]:
    """Makes an empty, migrated MLflow SQLite store at the given path and returns its
    tracking URI."""
    return functools.partial(copy_mlflow_store, mlflow_store_template)


@pytest.fixture
def mlflow_uri(tmp_path: Path, new_mlflow_store: Callable[[Path], str]) -> str:
    """The tracking URI of an empty, migrated MLflow SQLite store at tmp_path / mlflow.db."""
    return new_mlflow_store(tmp_path / "mlflow.db")


@contextmanager
def postgres_databases(count: int, prefix: str = "autotune_it") -> Iterator[list[str]]:
    """Fresh PostgreSQL databases (the job store, Optuna and MLflow each need their own),
    dropped afterwards."""
    import sqlalchemy

    unreachable = postgres_unreachable(ADMIN_URL)
    if unreachable is not None:
        message = (
            f"needs PostgreSQL at {_shown(ADMIN_URL)} (set AUTOTUNE_TEST_POSTGRES to use "
            f"another server): {unreachable}"
        )
        if os.environ.get("AUTOTUNE_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    engine = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    names = [f"{prefix}_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    admin = sqlalchemy.make_url(ADMIN_URL)
    try:
        with engine.connect() as connection:
            for name in names:
                connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
        yield [admin.set(database=name).render_as_string(hide_password=False) for name in names]
    finally:
        with engine.connect() as connection:
            for name in names:
                connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        engine.dispose()


@functools.cache
def postgres_unreachable(url: str) -> str | None:
    """Why the PostgreSQL server at `url` cannot be used, or None; asked once a session."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        url, poolclass=sqlalchemy.pool.NullPool, connect_args={"connect_timeout": 10}
    )
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT 1"))
    except sqlalchemy.exc.OperationalError as exc:
        return str(exc.orig or exc).strip().splitlines()[0]
    finally:
        engine.dispose()
    return None


def _shown(url: str) -> str:
    import sqlalchemy

    return sqlalchemy.make_url(url).render_as_string(hide_password=True)


@pytest.fixture
def private_postgres() -> Iterator[PrivateCluster]:
    """A PostgreSQL server of this test's own, which it may stop or restart (the shared one
    at ADMIN_URL never is): initdb into a temporary directory, a free port, pg_ctl; stopped
    and removed afterwards. Skips where the server binaries are not installed."""
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(private_cluster())
        except Unavailable as reason:
            pytest.skip(f"needs a private PostgreSQL cluster: {reason}")
        yield cluster


def stored_trials(storage: str, study: str) -> list[Any]:
    """A stored study's trial records, read with a connection that is closed afterwards
    (polling loops that leave engines to the garbage collector exhaust PostgreSQL's
    clients)."""
    from autotune.results import opened_store

    with opened_store(study, storage, "study") as store:
        return store.records()
