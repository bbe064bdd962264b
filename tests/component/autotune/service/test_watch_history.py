"""A watch says what each check found: its history (first, unchanged, changed, with what
changed and the job it started) over the API, a re-tune's status naming the job it re-tunes
and the change, the scheduler's log, and a notice posted to the watch's URL when a job it
submitted ends."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from autotune.requests.uploads import model_file_sha256
from autotune.service import watches as watches_module
from autotune.service.changes import describe_change, mlflow_run
from autotune.service.db import Database
from autotune.service.runner import JobRunner
from autotune.service.settings import HardwareSurvey, ServiceSettings
from autotune.service.watches import Scheduler
from autotune.tracking.view import run_link
from experiments.digits.model import export_weights
from tests.service_fixtures import Notices, tiny_onnx_bytes
from tests.service_support import ReplacedNodes, due_now, service_request, wait_for


@pytest.fixture
def nodes(settings: ServiceSettings) -> ReplacedNodes:
    """The trial nodes the service's hardware survey reports, which a test may replace."""
    replaced = ReplacedNodes()
    settings.hardware = HardwareSurvey(replaced.kinds, ttl_s=0)
    return replaced


def create_watch(client: TestClient, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    created = client.post("/v1/watches", json=fields, headers=headers)
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def test_a_watch_keeps_its_checks_and_a_retune_says_what_changed(
    settings: ServiceSettings,
    db: Database,
    client: TestClient,
    alice: dict[str, str],
    nodes: ReplacedNodes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert settings.models_root is not None
    weights = settings.models_root / "digits.safetensors"
    export_weights(weights)  # the cached weights: no training
    before = model_file_sha256(weights)
    model = {"entry_point": "experiments.digits.model:architecture", "weights": weights.name}
    watch = create_watch(client, alice, request=service_request(model=model), every="1h")
    assert watch["checks"] == [] and watch["notify"] is None
    scheduler = Scheduler(db, settings)
    caplog.set_level(logging.INFO, logger="autotune.watches")

    (first,) = scheduler.tick()
    due_now(db, watch["id"])
    assert scheduler.tick() == []
    export_weights(weights, seed=1, epochs=1)
    after = model_file_sha256(weights)
    due_now(db, watch["id"])
    (retune,) = scheduler.tick()

    checks = client.get(f"/v1/watches/{watch['id']}", headers=alice).json()["checks"]
    assert [c["outcome"] for c in checks] == ["changed", "unchanged", "first"]
    changed, unchanged, first_check = checks
    hardware = nodes.profile.fingerprint
    assert changed["change"] == {
        "model": {"what": "model weights", "old": before, "new": after},
        "hardware": None,
    }
    assert changed["job_id"] == retune and unchanged["job_id"] is None
    assert unchanged["change"] is None and unchanged["note"] is None
    assert first_check["change"] == {
        "model": {"what": "model weights", "old": None, "new": before},
        "hardware": {"old": None, "new": hardware},
    }
    assert first_check["job_id"] == first
    assert client.get("/v1/watches", headers=alice).json()["watches"][0]["checks"] == checks

    status = client.get(f"/v1/jobs/{retune[:6]}", headers=alice).json()
    assert status["id"] == retune and status["watch_id"] == watch["id"]
    assert status["retune"] == {"of": first, **changed["change"]}
    assert client.get(f"/v1/jobs/{first}", headers=alice).json()["retune"] is None

    logged = [r.getMessage() for r in caplog.records if r.name == "autotune.watches"]
    assert logged[0].startswith(f"watch {watch['id']}: first check: model weights {before[:8]}")
    assert logged[1] == f"watch {watch['id']}: unchanged"
    assert f"model weights changed ({before[:8]}… → {after[:8]}…)" in logged[2]
    assert f"a re-tune of job {first}" in logged[2]


def test_a_watch_keeps_only_its_latest_checks(
    settings: ServiceSettings,
    db: Database,
    client: TestClient,
    alice: dict[str, str],
    nodes: ReplacedNodes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watches_module, "CHECKS_KEPT", 2)
    assert settings.models_root is not None
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx_bytes())
    request = service_request(model={"onnx": "tiny.onnx"})
    watch = create_watch(client, alice, request=request, every="1h")
    scheduler = Scheduler(db, settings)
    scheduler.tick()
    for _ in range(3):
        due_now(db, watch["id"])
        scheduler.tick()
    checks = client.get(f"/v1/watches/{watch['id'][:5]}", headers=alice).json()["checks"]
    assert [c["outcome"] for c in checks] == ["unchanged", "unchanged"]
    assert client.delete(f"/v1/watches/{watch['id']}", headers=alice).status_code == 204


def test_a_watch_with_an_unreadable_model_keeps_why(
    settings: ServiceSettings, db: Database, client: TestClient, alice: dict[str, str]
) -> None:
    assert settings.models_root is not None
    model_file = settings.models_root / "tiny.onnx"
    model_file.write_bytes(tiny_onnx_bytes())
    request = service_request(model={"onnx": "tiny.onnx"})
    watch = create_watch(client, alice, request=request, every="1h")
    model_file.unlink()
    assert Scheduler(db, settings).tick() == []
    (check,) = client.get(f"/v1/watches/{watch['id']}", headers=alice).json()["checks"]
    assert check["outcome"] == "error" and check["job_id"] is None
    assert check["note"].startswith("cannot read its model: ") and "tiny.onnx" in check["note"]


def test_a_watch_posts_the_end_of_its_job_to_its_url(
    settings: ServiceSettings,
    db: Database,
    client: TestClient,
    alice: dict[str, str],
    nodes: ReplacedNodes,
    notice_server: tuple[str, Notices],
) -> None:
    """The job fails (the trial nodes the survey reports are not there to run it): its
    notice says which watch and job, how it ended and why."""
    url, notices = notice_server
    assert settings.models_root is not None
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx_bytes())
    request = service_request(model={"onnx": "tiny.onnx"})
    watch = create_watch(client, alice, request=request, every="1h", notify=url)
    assert watch["notify"] == url
    (job_id,) = Scheduler(db, settings).tick()
    assert JobRunner(db, settings).run_once() == job_id
    status = client.get(f"/v1/jobs/{job_id}", headers=alice).json()
    assert status["state"] == "failed"
    (notice,) = wait_for(lambda: notices.received, 10, "the notice")
    assert notice["watch_id"] == watch["id"] and notice["job_id"] == job_id
    assert notice["state"] == "failed" and notice["error"] == status["error"]
    assert notice["changed"] == "the watch's first tuning" and notice["change"] is None
    assert notice["job"] == f"/v1/jobs/{job_id}" and notice["study"] == status["study"]
    assert notice["headline"] is None and notice["mlflow"] is None


def test_a_notice_that_cannot_be_posted_leaves_the_job_as_it_ended(
    settings: ServiceSettings,
    db: Database,
    client: TestClient,
    alice: dict[str, str],
    nodes: ReplacedNodes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert settings.models_root is not None
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx_bytes())
    request = service_request(model={"onnx": "tiny.onnx"})
    nowhere = "http://127.0.0.1:9/closed"  # the discard port: nothing listens
    create_watch(client, alice, request=request, every="1h", notify=nowhere)
    (job_id,) = Scheduler(db, settings).tick()
    assert JobRunner(db, settings).run_once() == job_id
    assert client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "failed"
    assert f"job {job_id}: posting its end to its watch's URL failed" in caplog.text


@pytest.mark.parametrize("url", ["ftp://example.org/x", "hooks.example.org", "http://", "x" * 9])
def test_a_notify_url_must_be_http_naming_a_host(
    client: TestClient, alice: dict[str, str], settings: ServiceSettings, url: str
) -> None:
    assert settings.models_root is not None
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx_bytes())
    body = {"request": service_request(model={"onnx": "tiny.onnx"}), "every": "1h", "notify": url}
    answer = client.post("/v1/watches", json=body, headers=alice)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"]["field"] == "notify"


def test_a_change_and_a_run_read_in_words() -> None:
    registered = {"what": "registered model", "old": "team~a~m/3", "new": "team~a~m/4"}
    assert describe_change({"model": registered, "hardware": None}) == (
        "registered model changed (team~a~m/3 → team~a~m/4)"
    )
    hardware = {"old": "a" * 64, "new": "b" * 64}
    assert describe_change({"model": None, "hardware": hardware}) == (
        "hardware changed (aaaaaaaa… → bbbbbbbb…)"
    )
    run = {"run_id": "r1", "experiment_id": "7", "tracking_uri": "https://mlflow.example.org/"}
    assert mlflow_run(run)["link"] == f"https://mlflow.example.org/{run_link('7', 'r1')}"
    for hidden in ("http://…", "sqlite:///…/mlflow.db"):
        assert mlflow_run({**run, "tracking_uri": hidden})["link"] is None
