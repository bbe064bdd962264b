"""Job runners in the test's process: a job tuned to a registered model, models scoped to
their team, a failed job's one-line error, a cancel that stops the study cleanly, a model
directory under the models root. Runner processes and Ray: tests/system/autotune/service/
test_job_runner.py."""

from __future__ import annotations

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
from autotune.service.jobs import JobStore
from autotune.service.runner import JobRunner
from autotune.service.submission import prepare_job
from autotune.service.tokens import Principal
from tests.conftest import stored_trials
from tests.onnx_models import tiny_onnx
from tests.service_support import (
    principal,
    service_request,
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
