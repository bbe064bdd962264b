"""The test suite's own machinery: the private PostgreSQL cluster, skipping without the shared
server, the check that tests write nothing into the repository, test ports and a child
process's output read as it comes."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tests.conftest as shared
from tests import repo_writes
from tests.ports import TEST_PORTS, free_port
from tests.postgres_cluster import PrivateCluster, Unavailable, private_cluster
from tests.process_output import ProcessOutput
from tests.service_support import wait_for


def _scalar(url: str, query: str) -> object:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(sqlalchemy.text(query)).scalar_one()
    finally:
        engine.dispose()


def _shared_server_started_at() -> object | None:
    if shared.postgres_unreachable(shared.ADMIN_URL) is not None:
        return None
    return _scalar(shared.ADMIN_URL, "SELECT pg_postmaster_start_time()")


@pytest.mark.integration
def test_a_private_cluster_restarts_alone(private_postgres: PrivateCluster) -> None:
    import sqlalchemy

    shared_before = _shared_server_started_at()
    assert private_postgres.port != 5432
    engine = sqlalchemy.create_engine(private_postgres.url(), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("CREATE TABLE kept (x int)"))
            connection.execute(sqlalchemy.text("INSERT INTO kept VALUES (7)"))
        held = engine.connect()
        started = held.execute(sqlalchemy.text("SELECT pg_postmaster_start_time()")).scalar()

        private_postgres.restart()

        with pytest.raises(sqlalchemy.exc.OperationalError):  # the restart cut it
            held.execute(sqlalchemy.text("SELECT 1"))
        held.close()
        engine.dispose()
        assert private_postgres.is_running()
        assert _scalar(private_postgres.url(), "SELECT x FROM kept") == 7
        assert _scalar(private_postgres.url(), "SELECT pg_postmaster_start_time()") > started
    finally:
        engine.dispose()
    # The machine's shared server was not restarted with it.
    assert _shared_server_started_at() == shared_before


@pytest.mark.integration
def test_a_private_cluster_is_stopped_and_removed_afterwards() -> None:
    try:
        with private_cluster() as cluster:
            root, url = cluster.root, cluster.url()
            assert _scalar(url, "SELECT 1") == 1
    except Unavailable as reason:
        pytest.skip(str(reason))
    assert not root.exists()
    import sqlalchemy

    with pytest.raises(sqlalchemy.exc.OperationalError):
        _scalar(url, "SELECT 1")


def test_postgres_tests_skip_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"postgresql+psycopg://postgres:secret@127.0.0.1:{free_port()}/test"
    monkeypatch.setattr(shared, "ADMIN_URL", url)
    monkeypatch.delenv("AUTOTUNE_TEST_REQUIRE_POSTGRES", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped, shared.postgres_databases(1):
        pytest.fail("no database can have been made")
    reason = str(skipped.value)
    assert "needs PostgreSQL at" in reason and "AUTOTUNE_TEST_POSTGRES" in reason
    assert "secret" not in reason  # the URL is shown without its password

    monkeypatch.setenv("AUTOTUNE_TEST_REQUIRE_POSTGRES", "1")
    with (
        pytest.raises(pytest.fail.Exception, match="needs PostgreSQL at"),
        shared.postgres_databases(1),
    ):
        pass


def test_postgres_databases_keep_the_admin_urls_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The databases' URLs are the admin URL with only the database name changed."""
    if shared.postgres_unreachable(shared.ADMIN_URL) is not None:
        pytest.skip(f"needs PostgreSQL at {shared.ADMIN_URL}")
    import sqlalchemy

    admin = sqlalchemy.make_url(shared.ADMIN_URL)
    with shared.postgres_databases(1) as (url,):
        made = sqlalchemy.make_url(url)
        assert made.set(database=admin.database) == admin
        assert _scalar(url, "SELECT current_database()") == made.database


def test_new_files_in_the_repository_are_found(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("the developer's")
    for skipped in (".venv/lib", "pkg/__pycache__", ".pytest_cache", "x.egg-info"):
        (tmp_path / skipped).mkdir(parents=True)
    (tmp_path / "mlruns" / "1").mkdir(parents=True)
    (tmp_path / "mlruns" / "1" / "old").write_text("")
    before = repo_writes.snapshot(tmp_path)

    (tmp_path / "mlruns" / "1" / "run").mkdir()
    (tmp_path / "mlruns" / "1" / "run" / "meta.yaml").write_text("")
    (tmp_path / "kept.txt").write_text("changed, not new")
    (tmp_path / ".venv" / "lib" / "site.py").write_text("")
    (tmp_path / "pkg" / "__pycache__" / "m.pyc").write_text("")
    (tmp_path / ".pytest_cache" / "v").write_text("")
    (tmp_path / "x.egg-info" / "PKG-INFO").write_text("")
    cache = tmp_path / "experiments" / "digits" / ".cache"
    cache.mkdir(parents=True)
    (cache / "cnn-0.safetensors").write_text("")
    (tmp_path / "autotune-out").mkdir()
    (tmp_path / "autotune-out" / "tuned.yaml").write_text("")

    found = repo_writes.new_files(before, repo_writes.snapshot(tmp_path))
    assert found == ["autotune-out/tuned.yaml", "mlruns/1/run/meta.yaml"]
    assert "2 file(s) appeared" in repo_writes.describe(found)


def test_without_the_server_binaries_a_private_cluster_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tests.postgres_cluster as clusters

    monkeypatch.setattr(clusters, "BIN_GLOB", str(tmp_path / "none" / "*" / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unavailable, match="initdb, pg_ctl, postgres"), private_cluster():
        pytest.fail("no cluster can have been started")


def _holder(directory: Path, exclusive: bool, order: list[str], name: str) -> Any:
    """A thread that holds the machine (shared or alone) until its `release` is set."""
    import threading

    from tests.machine_share import machine_share

    release = threading.Event()

    def hold() -> None:
        with machine_share(directory, exclusive):
            order.append(name)
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    thread.release = release  # type: ignore[attr-defined]
    return thread


def _held(path: Path) -> bool:
    import fcntl

    if not path.exists():
        return False
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def test_machine_share_lets_shared_holders_in_together(tmp_path: Path) -> None:
    order: list[str] = []
    first = _holder(tmp_path, False, order, "first")
    second = _holder(tmp_path, False, order, "second")
    wait_for(lambda: len(order) == 2, 30, "both shared holders")
    for thread in (first, second):
        thread.release.set()
        thread.join()


def test_an_exclusive_holder_waits_for_the_shared_ones_and_goes_before_newcomers(
    tmp_path: Path,
) -> None:
    import time

    order: list[str] = []
    shared_holder = _holder(tmp_path, False, order, "shared")
    wait_for(lambda: order == ["shared"], 30, "the shared holder")
    alone = _holder(tmp_path, True, order, "alone")
    wait_for(lambda: _held(tmp_path / "turnstile.lock"), 30, "the exclusive one to queue")
    newcomer = _holder(tmp_path, False, order, "newcomer")
    time.sleep(0.2)
    assert order == ["shared"]  # neither got in while the machine was held shared
    shared_holder.release.set()
    wait_for(lambda: order == ["shared", "alone"], 30, "the exclusive holder")
    time.sleep(0.2)
    assert order == ["shared", "alone"]  # the newcomer waits while the machine is held alone
    alone.release.set()
    wait_for(lambda: order == ["shared", "alone", "newcomer"], 30, "the newcomer")
    newcomer.release.set()
    for thread in (shared_holder, alone, newcomer):
        thread.join()


def test_a_free_port_is_outside_the_ranges_others_take_ports_from() -> None:
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low, high = (int(x) for x in ephemeral.read_text().split()) if ephemeral.exists() else (0, 0)
    for _ in range(50):
        port = free_port()
        assert port in TEST_PORTS and not low <= port <= high and not 10_002 <= port <= 19_999
        with socket.create_server(("127.0.0.1", port)):  # free: it binds
            pass


def said(script: str) -> ProcessOutput:
    return ProcessOutput(subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True))


def test_a_line_is_waited_for_as_it_comes_and_the_rest_is_kept() -> None:
    output = said("echo one; sleep 0.3; echo two; sleep 0.3; echo three")
    output.wait_for("two", within_s=30)
    assert "three" not in output.text  # seen before the process said it
    assert output.finished(within_s=30) == 0
    assert output.text == "one\ntwo\nthree\n"


def test_a_line_never_said_fails_when_the_process_ends_or_the_time_is_up() -> None:
    with pytest.raises(pytest.fail.Exception, match="never said 'two'.*one"):
        said("echo one").wait_for("two", within_s=30)
    slow = said("echo one; sleep 30")
    with pytest.raises(pytest.fail.Exception, match="never said 'two'"):
        slow.wait_for("two", within_s=0.5)
    slow.process.kill()
    slow.finished(within_s=30)
