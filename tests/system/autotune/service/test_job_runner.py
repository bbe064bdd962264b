"""Job runners as the service runs them: ten jobs on two runner processes each run exactly
once (PostgreSQL), a runner process killed mid-job whose job another finishes after the lease
expires, and a job whose model is inspected by a Ray worker."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import pytest
from mlflow.tracking import MlflowClient

from autotune.service.db import Database
from autotune.service.jobs import FINAL_STATES, JobStore
from autotune.service.runner import JobRunner
from autotune.service.settings import ServiceSettings
from autotune.service.submission import prepare_job
from autotune.service.tokens import Principal
from tests.conftest import postgres_databases, stored_trials
from tests.onnx_models import tiny_onnx
from tests.service_support import (
    job_states,
    principal,
    runner_processes,
    service_request,
    settings_for,
    sqlite_settings,
    wait_for,
)


@pytest.mark.slow
@pytest.mark.integration
def test_a_model_that_does_not_fit_the_data_fails_naming_the_field_on_ray(tmp_path: Path) -> None:
    """An ONNX model with an input of shape [4] and the digits data, inspected by a Ray
    worker: the job's error names the field and the rule, on one line."""
    settings = sqlite_settings(tmp_path, executor="ray")
    assert settings.models_root is not None
    onnx.save_model(tiny_onnx(), str(settings.models_root / "tiny.onnx"))
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    request = service_request(model={"onnx": "tiny.onnx"})
    job, _ = store.submit(prepare_job(request, alice, settings))
    assert JobRunner(db, settings).run_once() == job.id
    failed = store.get(alice, job.id)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error.startswith("data.entry_point: inputs must fit the model"), failed.error
    assert "\n" not in failed.error and "Traceback" not in failed.error
    db.close()


@contextmanager
def on_postgres(
    tmp_path: Path, lease_s: float
) -> Iterator[tuple[ServiceSettings, JobStore, Principal]]:
    """The service's settings on three fresh PostgreSQL databases (jobs, studies, MLflow), its
    job store and alice."""
    with postgres_databases(3) as (jobs_db, studies_db, mlflow_db):
        settings = settings_for(tmp_path, jobs_db, studies_db, mlflow_db, lease_s=lease_s)
        db = Database(settings.db)
        try:
            yield settings, JobStore(db), principal(db)
        finally:
            db.close()


# Ten jobs submitted at once: both runners claim several while the other claims too.
JOBS = 10


@pytest.mark.integration
@pytest.mark.slow
def test_jobs_on_two_runners_each_run_exactly_once(tmp_path: Path) -> None:
    with on_postgres(tmp_path, lease_s=10.0) as (settings, store, alice):
        ids: list[str] = []
        lock = threading.Lock()

        def submit(index: int) -> None:
            draft = prepare_job(service_request(name=f"digits-{index}", trials=2), alice, settings)
            job, created = store.submit(draft)
            assert created
            with lock:
                ids.append(job.id)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(JOBS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(ids)) == JOBS

        with runner_processes(settings, 2):
            wait_for(
                lambda: all(s in FINAL_STATES for s in job_states(store, ids).values()),
                1200,
                f"{JOBS} jobs to end",
                lambda: sorted(job_states(store, ids).values()),
            )

        jobs = [store.get(alice, job_id) for job_id in ids]
        assert [(job.state, job.error) for job in jobs if job.state != "succeeded"] == []
        assert all(job.attempts == 1 for job in jobs)  # nobody claimed a job twice
        client = MlflowClient(settings.tracking_uri)
        for job in jobs:
            trials = stored_trials(settings.storage, job.study_name)
            assert len(trials) == 2, job.study_name  # measured once, not twice
            name = f"token~alice~{job.request['name']}"
            (version,) = client.search_model_versions(f"name = '{name}'")
            assert version.tags["autotune.job"] == job.id


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_runners_job_completes_after_the_lease_expires(tmp_path: Path) -> None:
    with on_postgres(tmp_path, lease_s=3.0) as (settings, store, alice):
        job, _ = store.submit(prepare_job(service_request(trials=8), alice, settings))

        with runner_processes(settings, 1) as (first,):
            wait_for(
                lambda: (
                    (now := store.get(alice, job.id)).trials_done >= 3 or now.state in FINAL_STATES
                ),
                300,
                "three trials",
            )
            os.kill(first.pid, signal.SIGKILL)
            first.join(30)
        before = store.get(alice, job.id)
        assert before.state == "running" and before.attempts == 1, before.error
        done_before = stored_trials(settings.storage, job.study_name)
        kept = {t.number for t in done_before if t.state == "complete"}

        with runner_processes(settings, 1):
            wait_for(lambda: store.get(alice, job.id).state in FINAL_STATES, 300, "the job")

        after = store.get(alice, job.id)
        assert after.state == "succeeded", after.error
        assert after.attempts == 2 and after.result is not None
        trials = stored_trials(settings.storage, job.study_name)
        complete = {t.number for t in trials if t.state == "complete"}
        assert kept <= complete  # resumed: the first runner's trials were kept
        counted = [t for t in trials if t.counted]
        assert len(counted) == 8  # the budget, not the budget twice
