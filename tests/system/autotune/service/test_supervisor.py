"""The runners of `autotune serve` are supervised: one that ended is replaced and the job it
held goes back to the queue at once, a running job whose lease expired goes back too, and
/healthz tells whether this server's runners can work."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from autotune.service import create_app
from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.settings import ServiceSettings
from autotune.service.submission import prepare_job
from autotune.service.supervisor import RunnerCounts, Supervisor
from tests.service_support import principal, service_request, sqlite_settings, wait_for


def healthz(settings: ServiceSettings, db: Database, counts: Any = None) -> tuple[int, Any]:
    with TestClient(create_app(settings, db, runner_counts=counts)) as client:
        response = client.get("/healthz")
    return response.status_code, response.json()


def sleeper(settings: ServiceSettings, index: int, token: str) -> Any:
    """A process that stands in for a runner (the supervisor only watches it)."""
    process = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(600,))
    process.start()
    return process


def test_healthz_says_whether_the_servers_runners_can_work(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)

    def counts(expected: int, alive: int, restarts: int) -> Any:
        return lambda: RunnerCounts(expected, alive, restarts)

    status, body = healthz(settings, db, counts(2, 2, 0))
    runners = {"expected": 2, "alive": 2, "restarts": 0}
    assert (status, body) == (200, {"status": "ok", "runners": runners})
    status, body = healthz(settings, db, counts(2, 1, 3))
    assert (status, body["status"]) == (200, "degraded")
    assert "1 of 2 job runners alive" in body["reason"]
    status, body = healthz(settings, db, counts(2, 0, 4))
    assert (status, body["status"]) == (503, "unavailable")
    assert "none of this server's 2 job runners is alive" in body["reason"]
    assert body["runners"] == {"expected": 2, "alive": 0, "restarts": 4}
    assert healthz(settings, db) == (200, {"status": "ok"})  # an API without runners
    db.close()


def test_running_jobs_whose_lease_expired_go_back_to_the_queue(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(name="first"), alice, settings))
    other, _ = store.submit(prepare_job(service_request(name="second"), alice, settings))
    claimed = {store.claim("gone:1:a", 0.1).id, store.claim("gone:2:b", 0.1).id}  # type: ignore[union-attr]
    assert claimed == {job.id, other.id}
    store.cancel(alice, other.id)  # asked to stop, but its runner is gone
    wait_for(lambda: store.expired_leases() == 2, 30, "the leases to expire")
    status, body = healthz(settings, db)
    assert (status, body["status"], body["expired_leases"]) == (200, "degraded", 2)

    Supervisor(settings, store, 0, start=sleeper).check()

    requeued = store.get(alice, job.id)
    assert requeued.state == "queued" and requeued.lease_owner is None
    cancelled = store.get(alice, other.id)
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    assert store.expired_leases() == 0
    assert healthz(settings, db) == (200, {"status": "ok"})
    db.close()


@pytest.mark.slow
def test_a_runner_that_died_is_replaced_and_its_job_given_back_at_once(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(), alice, settings))
    # Checked when the test says so; a lease far from expiring: only the death frees the job.
    supervisor = Supervisor(settings, store, 1, start=sleeper, check_every_s=3600)
    supervisor.start()
    try:
        (slot,) = supervisor.slots
        first = slot.process
        assert store.claim(slot.owner, 3600).id == job.id  # type: ignore[union-attr]
        assert supervisor.counts() == RunnerCounts(1, 1, 0)

        os.kill(first.pid, signal.SIGKILL)
        first.join(30)
        assert supervisor.counts() == RunnerCounts(1, 0, 0)
        status, body = healthz(settings, db, supervisor.counts)
        assert (status, body["status"]) == (503, "unavailable")

        supervisor.check()
        assert store.get(alice, job.id).state == "queued"

        def replaced() -> bool:
            supervisor.check()
            return supervisor.counts() == RunnerCounts(1, 1, 1)

        wait_for(replaced, 60, "a new runner", supervisor.counts)
        assert slot.process is not first and slot.process.is_alive()
        assert healthz(settings, db, supervisor.counts)[1]["status"] == "ok"
    finally:
        supervisor.stop(grace_s=30)
    assert not slot.process.is_alive() and slot.process.exitcode == -signal.SIGTERM
    db.close()
