"""Job runners end to end: a job tuned to a registered model, a cancel that stops the
study cleanly, ten jobs on two runner processes each run exactly once (PostgreSQL),
and a runner killed mid-job whose job another runner finishes after the lease expires."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import onnx
import pytest
from mlflow.tracking import MlflowClient

from autotune.core.contract import ModelRef
from autotune.core.errors import RequestError
from autotune.requests.sources import source_fingerprint
from autotune.service.db import Database
from autotune.service.jobs import FINAL_STATES, JobStore
from autotune.service.runner import JobRunner
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
from tests.tuned_documents import tuned_document


@pytest.mark.slow
def test_a_job_is_tuned_and_its_artifact_registered(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(trials=3), alice, settings))

    assert JobRunner(db, settings).run_once() == job.id

    done = store.get(alice, job.id)
    assert done.state == "succeeded", done.error
    assert done.attempts == 1 and done.trials_done == 3 and done.lease_owner is None
    assert done.result is not None and done.result["study"]["name"] == job.study_name
    assert set(done.result["config"]) and "latency_p95_ms" in done.result["metrics"]
    registered = done.registered_model
    assert registered is not None and registered["uri"] == "models:/digits-svc@tuned"
    assert registered["mlflow_name"] == "token~alice~digits-svc"  # alice's, she has no team
    client = MlflowClient(settings.tracking_uri)
    version = client.get_model_version_by_alias("token~alice~digits-svc", "tuned")
    assert str(version.version) == registered["version"]
    assert version.tags["autotune.job"] == job.id
    assert JobRunner(db, settings).run_once() is None  # nothing left to claim


@pytest.mark.slow
def test_registered_models_are_scoped_to_their_team(tmp_path: Path) -> None:
    """Team y's job of the same name neither adds a version to team x's registered model
    nor moves its alias; each team's `models:/NAME` is its own; another team's model reads
    exactly like a missing one, and no request can name another team's namespace."""
    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, runner = JobStore(db), JobRunner(db, settings)
    xavier, xena = principal(db, "xavier", "x"), principal(db, "xena", "x")
    yves, zoe = principal(db, "yves", "y"), principal(db, "zoe")
    client = MlflowClient(settings.tracking_uri)
    experiment = client.create_experiment("t", artifact_location=str(tmp_path / "artifacts"))

    def tuned(owner: Principal, offset: float) -> dict[str, Any]:
        """What the runner registers when `owner`'s job 'shared' succeeds."""
        job, created = store.submit(prepare_job(service_request(name="shared"), owner, settings))
        assert created
        artifact = tmp_path / f"tuned-{offset}" / "model.onnx"
        artifact.parent.mkdir()
        onnx.save_model(tiny_onnx(offset), str(artifact))
        run_id = client.create_run(experiment).info.run_id
        return runner._register(job, "shared", tuned_document(artifact.parent, run_id, experiment))

    x, y = tuned(xavier, 1.0), tuned(yves, 2.0)
    assert x["uri"] == y["uri"] == "models:/shared@tuned" and x["version"] == y["version"] == "1"
    assert (x["mlflow_name"], y["mlflow_name"]) == ("team~x~shared", "team~y~shared")
    assert [str(v.version) for v in client.search_model_versions("name = 'team~x~shared'")] == ["1"]
    assert client.get_model_version_by_alias("team~x~shared", "tuned").tags["autotune.job"]

    def model_sha256(owner: Principal, uri: str) -> str:
        request = service_request(name="reader", model={"registered": uri})
        return prepare_job(request, owner, settings).model_sha256

    by_x = model_sha256(xena, "models:/shared@tuned")
    assert by_x == model_sha256(xavier, "models:/shared/1")
    assert model_sha256(yves, "models:/shared@tuned") != by_x
    refusals = set()
    for owner, uri in [
        (zoe, "models:/shared@tuned"),  # another team's
        (zoe, "models:/shared/1"),
        (zoe, "models:/never@tuned"),  # nobody's
        (yves, "models:/shared/2"),  # no such version of its own
    ]:
        with pytest.raises(RequestError) as info:
            model_sha256(owner, uri)
        assert (info.value.field, info.value.value) == ("model.registered", uri)
        refusals.add(info.value.rule)
    assert len(refusals) == 1, refusals
    with pytest.raises(RequestError) as info:
        model_sha256(yves, "models:/team~x~shared@tuned")
    assert info.value.field == "model.registered"
    ref = ModelRef(registered="models:/shared@tuned")
    assert source_fingerprint(ref, tmp_path, None, settings.tracking_uri, yves.namespace) == (
        "team~y~shared/1"
    )
    db.close()


@pytest.mark.slow
def test_a_failed_jobs_error_is_one_line_without_the_workers_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What GET /v1/jobs/{id} shows as `error`: bad input as field, rule and value; anything
    else as its type. The worker's traceback (server paths, pids) goes to the log only."""
    from ray.exceptions import RayTaskError, UnserializableException

    settings = sqlite_settings(tmp_path)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/srv/autotune/workers/inspection.py", line 53, in _probe\n'
        "    outputs = run_all(session, inputs)\n"
        "RuntimeError: (pid=4242, ip=10.0.0.7) boom"
    )
    mismatch = RequestError(
        "data.entry_point",
        "inputs must fit the model (InvalidArgument: Got invalid dimensions for input: X\n"
        " index: 0 Got: 1 Expected: 4)",
        "float32[1, 8, 8] per sample",
    )
    over_ray = RayTaskError(
        "TrialWorker.inspect()", traceback, mismatch, "ray::TrialWorker", 4242, "10.0.0.7"
    ).as_instanceof_cause()
    assert "/srv/autotune" in str(over_ray)  # what ray.get raises: the traceback is its message
    raised: list[BaseException] = [
        over_ray,
        UnserializableException(traceback),
        RuntimeError("boom\n" + traceback),
    ]
    errors = []
    for index, error in enumerate(raised):
        job, _ = store.submit(prepare_job(service_request(name=f"broken-{index}"), alice, settings))

        def fail(*args: Any, error: BaseException = error) -> Any:
            raise error

        monkeypatch.setattr(JobRunner, "_tune", fail)
        assert JobRunner(db, settings).run_once() == job.id
        failed = store.get(alice, job.id)
        assert failed.state == "failed"
        errors.append(failed.error)
    assert errors == [
        "data.entry_point: inputs must fit the model (InvalidArgument: Got invalid dimensions "
        "for input: X index: 0 Got: 1 Expected: 4) (got 'float32[1, 8, 8] per sample')",
        "internal error (UnserializableException); the server's log has the details",
        "internal error (RuntimeError); the server's log has the details",
    ]
    db.close()


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


@pytest.mark.slow
def test_cancel_stops_the_study_cleanly(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path, lease_s=0.6)
    db = Database(settings.db)
    store, alice = JobStore(db), principal(db)
    job, _ = store.submit(prepare_job(service_request(trials=40), alice, settings))
    runner = JobRunner(db, settings)
    thread = threading.Thread(target=runner.run_once)
    thread.start()
    wait_for(lambda: store.get(alice, job.id).trials_done >= 2, 120, "two trials")
    store.cancel(alice, job.id)
    thread.join(120)

    cancelled = store.get(alice, job.id)
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    trials = stored_trials(settings.storage, job.study_name)
    states = [t.state for t in trials]
    assert "running" not in states  # the running trials finished and were told
    assert 2 <= len(states) < 40


# Ten jobs submitted at once: both runners claim several while the other claims too.
JOBS = 10


@pytest.mark.integration
@pytest.mark.slow
def test_jobs_on_two_runners_each_run_exactly_once(tmp_path: Path) -> None:
    with postgres_databases(3) as (jobs_db, studies_db, mlflow_db):
        settings = settings_for(tmp_path, jobs_db, studies_db, mlflow_db, lease_s=10.0)
        db = Database(settings.db)
        store, alice = JobStore(db), principal(db)
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
        db.close()


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_runners_job_completes_after_the_lease_expires(tmp_path: Path) -> None:
    with postgres_databases(3) as (jobs_db, studies_db, mlflow_db):
        settings = settings_for(tmp_path, jobs_db, studies_db, mlflow_db, lease_s=3.0)
        db = Database(settings.db)
        store, alice = JobStore(db), principal(db)
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
        db.close()


def test_a_hugging_face_directory_under_the_models_root_is_resolved_and_hashed(
    tmp_path: Path,
) -> None:
    """A job names a model directory and its text under the models root; the job's model
    hash covers every file of the directory, and a link leading out of the root is refused
    with the field at fault."""
    from tests.hf_models import bert_directory, text_file

    settings = sqlite_settings(tmp_path)
    assert settings.models_root is not None
    alice = principal(Database(settings.db))
    bert_directory(settings.models_root / "encoder")
    text_file(settings.models_root / "lines.txt")
    request = service_request(
        model={"hf": "encoder", "task": "feature-extraction"}, data={"text": "lines.txt"}
    )
    draft = prepare_job(request, alice, settings)
    assert draft.request["model"]["hf"] == str(settings.models_root / "encoder")
    assert draft.request["data"]["text"] == str(settings.models_root / "lines.txt")
    assert draft.request["metric"] == {"kind": "fidelity"}
    (settings.models_root / "encoder" / "README.md").write_text("changed")
    assert prepare_job(request, alice, settings).model_sha256 != draft.model_sha256

    outside = tmp_path / "secret.txt"
    outside.write_text("not for the server")
    (settings.models_root / "encoder" / "vocab-link.txt").symlink_to(outside)
    with pytest.raises(RequestError) as raised:
        prepare_job(request, alice, settings)
    assert (raised.value.field, raised.value.rule) == (
        "model.hf",
        "must hold no link that leads outside it",
    )
