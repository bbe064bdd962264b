"""`autotune serve` as a real process (markers: integration, slow): a runner killed mid-job
is replaced and the job finishes on the new one; SIGTERM stops the runners, gives their
job back to the queue and exits 0 with no runner left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from autotune.service.db import Database
from autotune.service.jobs import JobStore
from autotune.service.submission import prepare_job
from tests.conftest import postgres_databases, stored_trials
from tests.serve_process import alive, health, serving, tail
from tests.service_support import (
    FAST,
    principal,
    service_request,
    settings_for,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_killed_runner_is_replaced_and_its_job_finishes(tmp_path: Path) -> None:
    with postgres_databases(3, "autotune_serve") as (jobs_db, studies_db, mlflow_db):
        # A lease that outlasts the test's patience: the job must come back because its
        # runner died, not because the lease ran out.
        settings = settings_for(tmp_path, jobs_db, studies_db, mlflow_db, lease_s=600.0)
        db = Database(settings.db)
        store, alice = JobStore(db), principal(db)
        log = tmp_path / "serve.log"
        with serving(settings, log, runners=1) as process:
            wait_for(lambda: (health(process, log) or {}).get("status") == "ok", 120, "serve")
            job, _ = store.submit(prepare_job(service_request(trials=6), alice, settings))
            wait_for(lambda: store.get(alice, job.id).trials_done >= 2, 300, "two trials")
            owner = store.get(alice, job.id).lease_owner
            assert owner is not None
            victim = int(owner.split(":")[1])
            assert victim in {p.pid for p in psutil.Process(process.pid).children()}
            os.kill(victim, signal.SIGKILL)

            wait_for(
                lambda: store.get(alice, job.id).state == "succeeded",
                300,
                "the job to finish on a new runner",
                lambda: (store.get(alice, job.id).state, tail(log)),
            )
            done = store.get(alice, job.id)
            assert done.attempts == 2 and done.result is not None
            body = health(process, log)
            assert body == {"status": "ok", "runners": {"expected": 1, "alive": 1, "restarts": 1}}
            assert "ended with exit code -9" in tail(log)
        trials = stored_trials(settings.storage, job.study_name)
        counted = [t for t in trials if t.counted]
        assert len(counted) == 6  # resumed: the budget, not the budget twice
        db.close()


def test_a_runner_whose_ray_node_died_is_replaced_and_its_job_finishes(tmp_path: Path) -> None:
    """Ray leaves a driver whose node died alive but useless: the runner notices, exits,
    and is replaced; the job goes back to the queue and finishes on the new runner."""
    with postgres_databases(3, "autotune_serve") as (jobs_db, studies_db, mlflow_db):
        settings = settings_for(
            tmp_path, jobs_db, studies_db, mlflow_db, lease_s=600.0, executor="ray"
        )
        db = Database(settings.db)
        store, alice = JobStore(db), principal(db)
        log = tmp_path / "serve.log"
        # Ray declares a node dead after its health checks fail: every second here, three
        # in a row, rather than its defaults' tens of seconds.
        quick_health_checks = {
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_timeout_ms": "2000",
            "RAY_health_check_failure_threshold": "3",
        }
        with serving(settings, log, runners=1, env=quick_health_checks) as process:
            wait_for(lambda: (health(process, log) or {}).get("status") == "ok", 120, "serve")
            # Long enough that the job is still running when the node's death is noticed
            # (the runner asks every few seconds, Ray declares the node dead in about five):
            # the runner's actors outlive their raylet and would finish a short job.
            slow = service_request(
                trials=20, measurement={**FAST, "min_seconds": 0.5, "max_seconds": 1.0}
            )
            job, _ = store.submit(prepare_job(slow, alice, settings))
            wait_for(lambda: store.get(alice, job.id).trials_done >= 2, 300, "two trials")
            owner = store.get(alice, job.id).lease_owner
            assert owner is not None
            runner = psutil.Process(int(owner.split(":")[1]))
            raylets = [p for p in runner.children(recursive=True) if p.name().startswith("raylet")]
            assert raylets, "the runner's own Ray has a raylet"
            for raylet in raylets:
                raylet.kill()

            wait_for(
                lambda: store.get(alice, job.id).state == "succeeded",
                600,
                "the job to finish on a new runner",
                lambda: (store.get(alice, job.id).state, tail(log)),
            )
            assert store.get(alice, job.id).attempts == 2
            assert "Ray node died" in tail(log, 10**6)
            assert f"(pid {runner.pid}) ended with exit code 3" in tail(log, 10**6)
        db.close()


@pytest.mark.parametrize(("executor", "runners"), [("inprocess", 2), ("ray", 1)])
def test_sigterm_stops_the_runners_and_gives_their_job_back(
    tmp_path: Path, executor: str, runners: int
) -> None:
    """On Ray too: Ray's own SIGTERM handler, installed when a runner starts its Ray, would
    kill the runner's trials and abort it; the runner's handler is put back after."""
    with postgres_databases(3, "autotune_serve") as (jobs_db, studies_db, mlflow_db):
        settings = settings_for(
            tmp_path, jobs_db, studies_db, mlflow_db, lease_s=600.0, executor=executor
        )
        db = Database(settings.db)
        store, alice = JobStore(db), principal(db)
        log = tmp_path / "serve.log"
        with serving(settings, log, runners=runners) as process:
            wait_for(lambda: (health(process, log) or {}).get("status") == "ok", 120, "serve")
            job, _ = store.submit(prepare_job(service_request(trials=40), alice, settings))
            wait_for(lambda: store.get(alice, job.id).trials_done >= 2, 300, "two trials")
            started = psutil.Process(process.pid).children(recursive=True)  # runners and all
            assert len(started) >= 2, started

            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=300)

            assert returncode == 0, tail(log)
            wait_for(
                lambda: not any(alive(p) for p in started),
                60,
                "every process serve started to end",
                lambda: [p.pid for p in started if alive(p)],
            )
            assert "stopping the job runners" in tail(log) and "Traceback" not in tail(log)
        given_back = store.get(alice, job.id)
        assert given_back.state == "queued", given_back.error
        assert given_back.lease_owner is None and given_back.attempts == 1
        trials = stored_trials(settings.storage, job.study_name)
        assert 2 <= len(trials) < 40
        assert "running" not in {t.state for t in trials}  # running trials ended
        db.close()
