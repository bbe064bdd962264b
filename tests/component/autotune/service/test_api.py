"""The REST API: every route, every error, over a SQLite service database."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import shutil
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from autotune.core.contract import NodeKind
from autotune.core.errors import NoTrialNodes
from autotune.service import Database, JobRunner, JobStore, ServiceSettings, create_app
from autotune.service.api import MAX_DOCUMENT_BYTES
from autotune.service.documents import DocumentParser
from autotune.service.settings import HardwareSurvey
from autotune.service.tokens import create_token, revoke_token
from tests.conftest import postgres_databases
from tests.service_fixtures import bearer, tiny_onnx_bytes
from tests.service_support import ReplacedNodes, service_request, settings_for, sqlite_settings

YAML_TYPES = ["application/yaml", "application/x-yaml", "text/yaml"]


def submit(client: TestClient, headers: dict[str, str], **overrides: Any) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=service_request(**overrides), headers=headers)
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def problem(response: Any, status: int = 422) -> dict[str, Any]:
    assert response.status_code == status, response.text
    detail: dict[str, Any] = response.json()["detail"]
    assert set(detail) == {"field", "rule", "value"}
    return detail


# -- health and tokens ---------------------------------------------------------------------


def test_healthz_needs_no_token(client: TestClient) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_healthz_is_503_when_the_database_is_down(
    client: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextmanager
    def down() -> Iterator[None]:
        raise OperationalError("SELECT 1", {}, ConnectionRefusedError("database is down"))
        yield

    monkeypatch.setattr(db, "transaction", down)
    response = client.get("/healthz")
    body = {"status": "unavailable", "reason": "the database does not answer"}
    assert (response.status_code, response.json()) == (503, body)


def test_docs_and_schema_are_served(client: TestClient, alice: dict[str, str]) -> None:
    assert client.get("/docs", headers=alice).status_code == 200
    document = client.get("/openapi.json", headers=alice).json()
    content = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", *YAML_TYPES, "multipart/form-data"}
    request_schema = document["components"]["schemas"]["TuningRequest"]
    assert "model" in request_schema["properties"]
    assert "storage" not in request_schema["properties"]


DOCS = ["/docs", "/redoc", "/openapi.json"]


@pytest.mark.parametrize("path", DOCS)
def test_the_docs_need_a_token_like_every_route(
    client: TestClient, alice: dict[str, str], path: str
) -> None:
    refused = client.get(path)
    assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
    assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
    served = client.get(path, headers=alice)
    assert served.status_code == 200
    assert ("openapi" in served.json()) if path == "/openapi.json" else ("<html" in served.text)


@pytest.mark.parametrize("path", DOCS)
def test_public_docs_need_no_token_but_the_api_still_does(
    settings: ServiceSettings, db: Database, path: str
) -> None:
    settings.public_docs = True
    with TestClient(create_app(settings, db)) as client:
        assert client.get(path).status_code == 200
        assert client.get("/v1/jobs").status_code == 401


ROUTES = [
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/x"),
    ("GET", "/v1/jobs/x/result"),
    ("GET", "/v1/jobs/x/pareto"),
    ("DELETE", "/v1/jobs/x"),
    ("GET", "/v1/watches"),
    ("POST", "/v1/watches"),
    ("GET", "/v1/watches/x"),
    ("DELETE", "/v1/watches/x"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic YWxpY2U6cHc=", "Bearer "])
def test_every_route_needs_a_valid_token(
    client: TestClient, method: str, path: str, header: str | None
) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = client.request(method, path, headers=headers, json=service_request())
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def down_settings(tmp_path: Path, db: str) -> ServiceSettings:
    studies, mlflow = f"sqlite:///{tmp_path / 'studies.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    return settings_for(tmp_path, db, studies, mlflow)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_down(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A service whose job database is really unreachable, and a token it issued while the
    database was up (SQLite: the database's directory removed; PostgreSQL: nothing listens
    on the URL's port)."""
    if request.param == "sqlite":
        (tmp_path / "jobs").mkdir()
        settings = down_settings(tmp_path, f"sqlite:///{tmp_path / 'jobs' / 'service.db'}")
        db = Database(settings.db)
        headers = bearer(create_token(db, "alice", team="a"))
        with TestClient(create_app(settings, db)) as client:
            assert client.get("/v1/jobs", headers=headers).status_code == 200
            shutil.rmtree(tmp_path / "jobs")
            db.engine.dispose()  # the pool's open connections would still read the file
            yield client, headers
        db.close()
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens there, so the migration on open could not run either.
    monkeypatch.setattr("autotune.service.db.migrate", lambda url: None)
    settings = down_settings(tmp_path, f"postgresql+psycopg://postgres@127.0.0.1:{port}/x")
    db = Database(settings.db)
    with TestClient(create_app(settings, db)) as client:
        yield client, bearer("at_" + "x" * 43)
    db.close()


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_is_503_while_the_database_is_down(
    database_down: tuple[TestClient, dict[str, str]], method: str, path: str
) -> None:
    client, headers = database_down
    response = client.request(method, path, headers=headers, json=service_request())
    assert response.status_code == 503
    assert response.json() == {
        "detail": "the service's job database is unavailable; try again later"
    }
    assert client.get("/healthz").status_code == 503


def test_a_submission_while_no_trial_node_is_alive_is_503_and_then_accepted(
    settings: ServiceSettings, db: Database, alice: dict[str, str]
) -> None:
    """A cluster whose nodes are still joining (or all left) has no hardware to key a job by:
    the service is unavailable for a while, not broken. Once a node is there, the same
    submission is accepted."""
    nodes = ReplacedNodes()
    joined = threading.Event()

    def survey() -> list[NodeKind]:
        if not joined.is_set():
            raise NoTrialNodes("the Ray cluster has no alive node that offers CPUs to trials")
        return nodes.kinds()

    settings.hardware = HardwareSurvey(survey, ttl_s=0)
    with TestClient(create_app(settings, db)) as client:
        response = client.post("/v1/jobs", json=service_request(), headers=alice)
        assert (response.status_code, response.headers["Retry-After"]) == (503, "10")
        assert response.json()["detail"] == (
            "the Ray cluster has no alive node that offers CPUs to trials; "
            "retry once a node has joined"
        )
        assert client.get("/v1/jobs", headers=alice).json()["jobs"] == []  # nothing written
        joined.set()
        assert submit(client, alice)["created"] is True


def test_a_revoked_token_is_refused(client: TestClient, db: Database) -> None:
    headers = bearer(create_token(db, "dave"))
    assert client.get("/v1/jobs", headers=headers).status_code == 200
    revoke_token(db, "dave")
    response = client.get("/v1/jobs", headers=headers)
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


# -- submitting ----------------------------------------------------------------------------


def test_a_json_submission_is_queued_and_an_identical_one_answers_with_it(
    client: TestClient, alice: dict[str, str]
) -> None:
    first = submit(client, alice)
    assert first["state"] == "queued" and first["created"] is True
    again = submit(client, alice)
    assert again == {**first, "created": False}
    other = submit(client, alice, budget={"trials": 4})
    assert other["id"] != first["id"] and other["created"] is True


def test_another_teams_identical_submission_is_a_job_of_its_own(
    client: TestClient, alice: dict[str, str], bob: dict[str, str], carol: dict[str, str]
) -> None:
    first = submit(client, alice)
    assert submit(client, bob) == {**first, "created": False}
    theirs = submit(client, carol)
    assert theirs["created"] is True and theirs["id"] != first["id"]
    assert client.get(f"/v1/jobs/{theirs['id']}", headers=carol).json()["state"] == "queued"
    assert client.get(f"/v1/jobs/{theirs['id']}", headers=alice).status_code == 404


@pytest.mark.parametrize("media_type", YAML_TYPES)
def test_a_yaml_submission_is_queued(
    client: TestClient, alice: dict[str, str], media_type: str
) -> None:
    body = yaml.safe_dump(service_request(name=f"yaml-{media_type.replace('/', '-')}"))
    headers = {**alice, "Content-Type": f"{media_type}; charset=utf-8"}
    first = client.post("/v1/jobs", content=body, headers=headers)
    assert first.status_code == 202 and first.json()["created"] is True
    again = client.post("/v1/jobs", content=body, headers=headers)
    assert again.json() == {**first.json(), "created": False}


def test_the_same_request_in_json_and_yaml_is_one_job(
    client: TestClient, alice: dict[str, str]
) -> None:
    first = submit(client, alice)
    body = yaml.safe_dump(service_request())
    again = client.post(
        "/v1/jobs", content=body, headers={**alice, "Content-Type": "application/yaml"}
    )
    assert again.json() == {**first, "created": False}


def stopped_parser(
    client: TestClient, body: str, headers: dict[str, str], **options: Any
) -> tuple[DocumentParser, int]:
    """The app's documents parsed by one parser process of their own (and `options`), started
    by submitting `body` and then stopped: a parse sent to it now waits until SIGCONT."""
    app: Any = client.app
    documents = DocumentParser(processes=1, limit_s=60.0, **options)
    app.state.service = dataclasses.replace(app.state.service, documents=documents)
    assert client.post("/v1/jobs", content=body, headers=headers).status_code == 202
    (pid,) = documents.pids()
    os.kill(pid, signal.SIGSTOP)
    return documents, pid


def test_a_submission_whose_parse_is_stuck_stalls_nobody_else(
    client: TestClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    """A YAML document may cost seconds to parse: it is parsed in a parser process, so while
    one is stuck (here: stopped), /healthz and other tenants' reads are answered."""
    body = yaml.safe_dump(service_request())
    headers = {**alice, "Content-Type": "application/yaml"}
    documents, pid = stopped_parser(client, body, headers)
    answered: list[int] = []
    stuck = threading.Thread(
        target=lambda: answered.append(
            client.post(
                "/v1/jobs", content=body.replace("digits-svc", "other"), headers=headers
            ).status_code
        )
    )
    stuck.start()
    try:
        while documents.in_flight == 0:
            threading.Event().wait(0.01)
        assert client.get("/healthz").status_code == 200
        assert client.get("/v1/jobs", headers=bob).status_code == 200
        assert stuck.is_alive() and answered == []  # the stuck parse is still stuck
    finally:
        os.kill(pid, signal.SIGCONT)
        stuck.join()
        documents.close()
    assert answered == [202]


def test_a_submission_while_every_parser_is_taken_is_503_with_retry_after(
    client: TestClient, alice: dict[str, str]
) -> None:
    body = yaml.safe_dump(service_request())
    headers = {**alice, "Content-Type": "application/yaml"}
    documents, pid = stopped_parser(client, body, headers, max_waiting=0)
    stuck = threading.Thread(target=lambda: client.post("/v1/jobs", content=body, headers=headers))
    stuck.start()
    try:
        while documents.in_flight == 0:
            threading.Event().wait(0.01)
        response = client.post("/v1/jobs", content=body, headers=headers)
        assert (response.status_code, response.headers["Retry-After"]) == (503, "5")
        assert response.json() == {"detail": "every request parser is busy; retry in a few seconds"}
    finally:
        os.kill(pid, signal.SIGCONT)
        stuck.join()
        documents.close()


def test_a_multipart_submission_without_a_model_is_queued(
    client: TestClient, alice: dict[str, str]
) -> None:
    files = {"request": (None, yaml.safe_dump(service_request()))}
    response = client.post("/v1/jobs", files=files, headers=alice)
    assert response.status_code == 202 and response.json()["created"] is True


def test_an_uploaded_onnx_model_is_stored_by_content(
    client: TestClient, alice: dict[str, str], settings: ServiceSettings
) -> None:
    data = tiny_onnx_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    request = service_request()
    del request["model"]
    files = {
        "request": (None, json.dumps(request)),
        "model": ("../../escape.onnx", data, "application/octet-stream"),
    }
    response = client.post("/v1/jobs", files=files, headers=alice)
    assert response.status_code == 202, response.text
    status = client.get(f"/v1/jobs/{response.json()['id']}", headers=alice).json()
    assert status["model"]["source"] == {"kind": "upload", "format": "onnx", "sha256": sha256}
    assert status["model"]["sha256"] == sha256
    assert (settings.uploads_dir / sha256 / "model.onnx").read_bytes() == data
    root = settings.data_dir.parent
    assert not [p for p in root.rglob("*escape*")], "the client's file name was used"
    again = client.post("/v1/jobs", files=files, headers=alice)
    assert again.json() == {**response.json(), "created": False}


def test_a_pickle_upload_is_refused(client: TestClient, alice: dict[str, str]) -> None:
    request = service_request()
    del request["model"]
    files = {
        "request": (None, json.dumps(request)),
        "model": ("model.onnx", pickle.dumps({"weights": [1.0, 2.0]}), "application/onnx"),
    }
    detail = problem(client.post("/v1/jobs", files=files, headers=alice))
    assert detail["field"] == "model"
    assert "pickle" in detail["value"]


def test_an_upload_over_the_cap_is_413(
    settings: ServiceSettings, db: Database, alice: dict[str, str]
) -> None:
    data = tiny_onnx_bytes()
    settings.max_upload_bytes = len(data) - 1
    request = service_request()
    del request["model"]
    files = {"request": (None, json.dumps(request)), "model": ("m", data)}
    with TestClient(create_app(settings, db)) as client:
        detail = problem(client.post("/v1/jobs", files=files, headers=alice), 413)
    assert detail["field"] == "model"
    assert str(len(data) - 1) in detail["rule"]
    assert not list(settings.uploads_dir.glob("[0-9a-f]*"))


def test_a_request_document_over_its_cap_is_413(client: TestClient, alice: dict[str, str]) -> None:
    body = json.dumps(service_request(name="x" * MAX_DOCUMENT_BYTES))
    response = client.post(
        "/v1/jobs", content=body, headers={**alice, "Content-Type": "application/json"}
    )
    assert problem(response, 413)["field"] == "body"


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", None])
def test_an_unknown_content_type_is_415(
    client: TestClient, alice: dict[str, str], content_type: str | None
) -> None:
    headers = dict(alice)
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = client.post("/v1/jobs", content=json.dumps(service_request()), headers=headers)
    assert problem(response, 415)["field"] == "content-type"


BAD_REQUESTS = [
    ({"colour": "red"}, "colour", "Extra inputs", "red"),
    ({"constraints": {"max_latency_p95_ms": -3}}, "constraints.max_latency_p95_ms", "", -3),
    ({"storage": "sqlite:///mine.db"}, "storage", "chosen by the service", "sqlite:///mine.db"),
    ({"tracking": {"uri": "http://x"}}, "tracking", "chosen by the service", {"uri": "http://x"}),
    ({"model": {"entry_point": "os:system"}}, "model.entry_point", "trusts", "os:system"),
    (
        {"model": {"entry_point": "experiments.digits.modle:build_model"}},
        "model.entry_point",
        "module must be found",
        "experiments.digits.modle:build_model",
    ),
    (
        {"data": {"entry_point": "experiments.digits.model:eval_dat"}},
        "data.entry_point",
        "has no attribute 'eval_dat'",
        "experiments.digits.model:eval_dat",
    ),
    (
        {"model": {"entry_point": "experiments.digits.model"}},
        "model.entry_point",
        "package.module:function",
        "experiments.digits.model",
    ),
    ({"model": {"onnx": "../outside.onnx"}}, "model.onnx", "inside", "../outside.onnx"),
    ({"model": {"onnx": "/etc/passwd"}}, "model.onnx", "relative", "/etc/passwd"),
    ({"data": {"npz": "../../data.npz"}}, "data.npz", "inside", "../../data.npz"),
    ({"search_space": "../default.yaml"}, "search_space", "no path", "../default.yaml"),
    ({"search_space": "missing.yaml"}, "search_space", "existing space file", "missing.yaml"),
    ({"budget": {"trials": True}}, "budget.trials", "not a boolean", True),
    ({"budget": {"trials": 2.5}}, "budget.trials", "integer", 2.5),
    ({"budget": {"trials": 3 * 10**9}}, "budget.trials", "less than or equal to 100000", 3 * 10**9),
    ({"budget": {"trials": 10**18}}, "budget.trials", "less than or equal to 100000", 10**18),
    (
        {"measurement": {"max_iters": 10**12}},
        "measurement.max_iters",
        "less than or equal to 10000000",
        10**12,
    ),
    ({"model": [1, 2]}, "model", "mapping", [1, 2]),
    ({"data": "x"}, "data", "mapping", "x"),
]


@pytest.mark.parametrize(("overrides", "field", "rule", "value"), BAD_REQUESTS)
def test_a_bad_request_is_422_naming_field_rule_and_value(
    client: TestClient,
    alice: dict[str, str],
    overrides: dict[str, Any],
    field: str,
    rule: str,
    value: Any,
) -> None:
    response = client.post("/v1/jobs", json=service_request(**overrides), headers=alice)
    detail = problem(response)
    assert (detail["field"], detail["value"]) == (field, value)
    assert rule in detail["rule"]


@pytest.mark.parametrize(
    ("body", "media_type", "rule"),
    [
        (b"{not json", "application/json", "valid JSON"),
        (b"name: [unclosed", "application/yaml", "valid YAML"),
        (b"- a list", "application/yaml", "mapping"),
        (b'{"name": NaN}', "application/json", "finite"),
        (b"\xff\xfe", "application/json", "valid JSON"),
        (b"[" * 100 + b"]" * 100, "application/json", "nest"),
    ],
)
def test_a_malformed_document_is_422(
    client: TestClient, alice: dict[str, str], body: bytes, media_type: str, rule: str
) -> None:
    response = client.post("/v1/jobs", content=body, headers={**alice, "Content-Type": media_type})
    detail = problem(response)
    assert detail["field"] == "request"
    assert rule in detail["rule"]


def test_yaml_aliases_cannot_blow_a_small_document_up(
    client: TestClient, alice: dict[str, str]
) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    body = "\n".join(lines).encode()
    response = client.post(
        "/v1/jobs", content=body, headers={**alice, "Content-Type": "application/yaml"}
    )
    assert "at most" in problem(response)["rule"]


@pytest.mark.parametrize(
    ("files", "field"),
    [
        ({"model": ("m", b"x")}, "request"),
        ({"request": (None, "name: x"), "extra": (None, "y")}, "multipart"),
        ({"request": (None, "name: x"), "model": (None, "not a file")}, "model"),
    ],
)
def test_a_malformed_multipart_submission_is_422(
    client: TestClient, alice: dict[str, str], files: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/jobs", files=files, headers=alice)
    assert problem(response)["field"] == field


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'--x\r\nContent-Disposition: form-data; name="request"\r\n\rname: x', "boundary=x"),
        (b"anything", ""),
    ],
)
def test_a_broken_multipart_body_is_422(
    client: TestClient, alice: dict[str, str], body: bytes, content_type: str
) -> None:
    headers = {**alice, "Content-Type": f"multipart/form-data; {content_type}".rstrip("; ")}
    response = client.post("/v1/jobs", content=body, headers=headers)
    assert problem(response)["field"] == "body"


# -- reading and cancelling ----------------------------------------------------------------


def test_a_queued_job_has_a_status_no_result_and_an_empty_front(
    client: TestClient, alice: dict[str, str]
) -> None:
    job_id = submit(client, alice)["id"]
    status = client.get(f"/v1/jobs/{job_id}", headers=alice).json()
    assert status["state"] == "queued"
    assert status["progress"] == {"trials_done": 0, "budget": 3}
    assert status["best"] is None and status["started_at"] is None
    assert status["created_at"].endswith("Z")
    assert status["study"] == f"digits-svc (job {job_id[:8]})"
    assert status["model"]["source"]["kind"] == "entry_point"
    result = client.get(f"/v1/jobs/{job_id}/result", headers=alice)
    assert result.status_code == 409 and "queued" in result.json()["detail"]
    pareto = client.get(f"/v1/jobs/{job_id}/pareto", headers=alice)
    assert (pareto.status_code, pareto.json()) == (200, {"trials": []})


def test_jobs_are_seen_by_their_team_only(
    client: TestClient,
    alice: dict[str, str],
    bob: dict[str, str],
    carol: dict[str, str],
) -> None:
    job_id = submit(client, alice)["id"]
    assert client.get(f"/v1/jobs/{job_id}", headers=bob).json()["id"] == job_id
    assert [j["id"] for j in client.get("/v1/jobs", headers=bob).json()["jobs"]] == [job_id]
    summary = client.get("/v1/jobs", headers=alice).json()["jobs"][0]
    assert summary["name"] == "digits-svc" and summary["state"] == "queued"
    assert client.get("/v1/jobs", headers=carol).json() == {"jobs": []}
    for method, path in [
        ("GET", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/jobs/{job_id}/result"),
        ("GET", f"/v1/jobs/{job_id}/pareto"),
        ("DELETE", f"/v1/jobs/{job_id}"),
    ]:
        response = client.request(method, path, headers=carol)
        assert response.status_code == 404, (method, path)
    assert client.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "queued"


@pytest.mark.parametrize("suffix", ["", "/result", "/pareto"])
def test_an_unknown_job_is_404(client: TestClient, alice: dict[str, str], suffix: str) -> None:
    response = client.get(f"/v1/jobs/nope{suffix}", headers=alice)
    assert response.status_code == 404 and "nope" in response.json()["detail"]
    assert client.delete("/v1/jobs/nope", headers=alice).status_code == 404


def test_cancelling_a_queued_job_cancels_it_and_again_is_fine(
    client: TestClient, alice: dict[str, str]
) -> None:
    job_id = submit(client, alice)["id"]
    first = client.delete(f"/v1/jobs/{job_id}", headers=alice)
    assert first.status_code == 202
    assert first.json()["state"] == "cancelled" and first.json()["finished_at"] is not None
    again = client.delete(f"/v1/jobs/{job_id}", headers=alice)
    assert (again.status_code, again.json()["state"]) == (202, "cancelled")
    result = client.get(f"/v1/jobs/{job_id}/result", headers=alice)
    assert result.status_code == 409 and "cancelled" in result.json()["detail"]
    resubmitted = submit(client, alice)
    assert resubmitted["id"] != job_id and resubmitted["created"] is True


def test_cancelling_a_running_job_asks_its_runner_to_stop(
    client: TestClient, db: Database, alice: dict[str, str]
) -> None:
    job_id = submit(client, alice)["id"]
    claimed = JobStore(db).claim("test-runner", 60)
    assert claimed is not None and claimed.id == job_id
    response = client.delete(f"/v1/jobs/{job_id}", headers=alice)
    assert response.status_code == 202
    status = response.json()
    assert (status["state"], status["cancel_requested"], status["attempts"]) == (
        "running",
        True,
        1,
    )
    assert status["started_at"] is not None


def test_the_result_of_an_infeasible_job_says_why_there_is_none(
    client: TestClient, db: Database, alice: dict[str, str]
) -> None:
    job_id = submit(client, alice)["id"]
    store = JobStore(db)
    assert store.claim("test-runner", 60) is not None
    store.finish(job_id, "test-runner", "infeasible", error="p95 above 0.001 ms everywhere")
    response = client.get(f"/v1/jobs/{job_id}/result", headers=alice)
    assert response.status_code == 409
    assert "no configuration met the constraints" in response.json()["detail"]
    assert "p95 above 0.001 ms everywhere" in response.json()["detail"]
    assert client.delete(f"/v1/jobs/{job_id}", headers=alice).status_code == 409


# -- watches -------------------------------------------------------------------------------


@pytest.fixture
def watched(settings: ServiceSettings) -> dict[str, Any]:
    assert settings.models_root is not None
    (settings.models_root / "tiny.onnx").write_bytes(tiny_onnx_bytes())
    return service_request(model={"onnx": "tiny.onnx"})


def test_a_watch_is_created_listed_read_and_deleted(
    client: TestClient, alice: dict[str, str], carol: dict[str, str], watched: dict[str, Any]
) -> None:
    body = {"request": watched, "every": "30m", "retune_trials": 2}
    created = client.post("/v1/watches", json=body, headers=alice)
    assert created.status_code == 201, created.text
    watch = created.json()
    assert (watch["every_s"], watch["cron"], watch["retune_trials"]) == (1800.0, None, 2)
    assert watch["request"] == watched and watch["last_job_id"] is None
    assert client.get("/v1/watches", headers=alice).json() == {"watches": [watch]}
    assert client.get(f"/v1/watches/{watch['id']}", headers=alice).json() == watch
    assert client.get("/v1/watches", headers=carol).json() == {"watches": []}
    assert client.get(f"/v1/watches/{watch['id']}", headers=carol).status_code == 404
    assert client.delete(f"/v1/watches/{watch['id']}", headers=carol).status_code == 404
    deleted = client.delete(f"/v1/watches/{watch['id']}", headers=alice)
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert client.get(f"/v1/watches/{watch['id']}", headers=alice).status_code == 404
    assert client.delete(f"/v1/watches/{watch['id']}", headers=alice).status_code == 404


def test_a_cron_watch_is_created(
    client: TestClient, alice: dict[str, str], watched: dict[str, Any]
) -> None:
    created = client.post(
        "/v1/watches", json={"request": watched, "cron": "0 3 * * *"}, headers=alice
    )
    assert created.status_code == 201, created.text
    assert created.json()["cron"] == "0 3 * * *" and created.json()["every_s"] is None


@pytest.mark.parametrize(
    ("schedule", "field", "value"),
    [
        ({"every": "30m", "cron": "0 3 * * *"}, "schedule", None),
        ({}, "schedule", None),
        ({"cron": "61 * * * *"}, "cron", "61 * * * *"),
        ({"cron": "every day"}, "cron", "every day"),
        ({"every": "soon"}, "every", "soon"),
        ({"every": "0s"}, "every", "0s"),
        ({"every": "1s"}, "every", "1s"),
        ({"every": "59s"}, "every", "59s"),
        ({"every": "400d"}, "every", "400d"),
        ({"every": "1h", "retune_trials": 10**12}, "retune_trials", 10**12),
        ({"every": "1h", "retune_trials": 0}, "retune_trials", 0),
        ({"every": "1h", "colour": "red"}, "colour", "red"),
        ({"every": 30}, "every", 30),
    ],
)
def test_a_bad_watch_is_422(
    client: TestClient,
    alice: dict[str, str],
    watched: dict[str, Any],
    schedule: dict[str, Any],
    field: str,
    value: Any,
) -> None:
    response = client.post("/v1/watches", json={"request": watched, **schedule}, headers=alice)
    detail = problem(response)
    assert (detail["field"], detail["value"]) == (field, value)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"every": "1h"}, "request"),
        ({"request": "name: x", "every": "1h"}, "request"),
        ({"request": {"name": "x", "storage": "s"}, "every": "1h"}, "storage"),
        ({"request": service_request(), "every": "1h"}, "model"),
    ],
)
def test_a_watch_with_a_bad_request_is_422(
    client: TestClient, alice: dict[str, str], body: dict[str, Any], field: str
) -> None:
    assert problem(client.post("/v1/watches", json=body, headers=alice))["field"] == field


def test_a_watch_body_that_is_not_json_is_422(client: TestClient, alice: dict[str, str]) -> None:
    response = client.post(
        "/v1/watches", content=b"{", headers={**alice, "Content-Type": "application/json"}
    )
    assert problem(response)["field"] == "body"


def test_a_watch_body_that_is_not_utf8_is_422(client: TestClient, alice: dict[str, str]) -> None:
    response = client.post(
        "/v1/watches",
        content=b'{"every": "1h", "request": "\xff\xfe"}',
        headers={**alice, "Content-Type": "application/json"},
    )
    detail = problem(response)
    assert (detail["field"], detail["value"]) == ("body", None)
    assert "UTF-8" in detail["rule"] and "0xff" in detail["rule"]


def test_a_streamed_watch_body_over_its_cap_is_413(
    client: TestClient, alice: dict[str, str]
) -> None:
    chunks = iter([b'{"every": "1h", "request": "', b"x" * MAX_DOCUMENT_BYTES, b'"}'])
    response = client.post(
        "/v1/watches", content=chunks, headers={**alice, "Content-Type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert problem(response, 413)["field"] == "body"


# -- a job run to its end ------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Any, str]]:
    """One job of the digits example, run by a job runner to its end."""
    settings = sqlite_settings(tmp_path_factory.mktemp("finished"))
    db = Database(settings.db)
    headers = bearer(create_token(db, "runner-test", team="a"))
    with TestClient(create_app(settings, db)) as client:
        job_id = submit(client, headers)["id"]
        assert JobRunner(db, settings).run_once() == job_id
        yield client, headers, job_id
    db.close()


@pytest.mark.slow
def test_a_finished_job_reports_its_outcome(finished: tuple[TestClient, Any, str]) -> None:
    client, headers, job_id = finished
    status = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert status["state"] == "succeeded", status["error"]
    assert status["progress"]["trials_done"] >= 3
    assert status["started_at"] <= status["finished_at"]
    assert status["attempts"] == 1 and status["error"] is None
    assert status["registered_model"]["uri"].startswith("models:/digits-svc@")
    assert set(status["best"]) == {"trial", "config", "metrics"}


@pytest.mark.slow
def test_a_finished_job_has_its_tuned_config_and_front(
    finished: tuple[TestClient, Any, str],
) -> None:
    client, headers, job_id = finished
    result = client.get(f"/v1/jobs/{job_id}/result", headers=headers)
    assert result.status_code == 200, result.text
    tuned = result.json()
    assert {"config", "metrics", "baseline", "constraints", "study"} <= set(tuned)
    assert tuned["study"]["name"] == f"digits-svc (job {job_id[:8]})"
    assert tuned["constraints"]["max_accuracy_drop"]["met"] is True
    trials = client.get(f"/v1/jobs/{job_id}/pareto", headers=headers).json()["trials"]
    assert trials and {"trial_number", "config", "metrics"} == set(trials[0])
    front = {t["trial_number"] for t in trials}
    # a configuration of the front, or the unmodified model where none beat it beyond the noise
    chosen, baseline = tuned["study"]["trial_number"], tuned["revalidation"]["baseline_trial"]
    assert chosen in front or chosen == baseline


@pytest.mark.slow
def test_a_finished_job_cannot_be_cancelled(finished: tuple[TestClient, Any, str]) -> None:
    client, headers, job_id = finished
    response = client.delete(f"/v1/jobs/{job_id}", headers=headers)
    assert response.status_code == 409 and "succeeded" in response.json()["detail"]


def test_a_safetensors_upload_with_a_deeply_nested_header_is_refused(
    client: TestClient, alice: dict[str, str]
) -> None:
    """JSON nested past the parser's depth is not a header of tensors: 4xx, not a 500."""
    header = b"[" * 100_000 + b"]" * 100_000
    header = b"{" + b'"a":' + header + b"}"
    upload = len(header).to_bytes(8, "little") + header
    request = service_request()
    del request["model"]
    files = {
        "request": (None, json.dumps(request)),
        "model": ("weights.safetensors", upload, "application/octet-stream"),
    }
    response = client.post("/v1/jobs", files=files, headers=alice)
    assert response.status_code == 422, response.text
    assert problem(response)["field"] == "model"


def test_a_path_longer_than_a_file_system_takes_is_422_naming_it(
    client: TestClient, alice: dict[str, str]
) -> None:
    request = service_request()
    request["model"] = {"entry_point": "pkg.mod:build", "weights": "w/" * 2500 + "x.safetensors"}
    detail = problem(client.post("/v1/jobs", json=request, headers=alice))
    assert detail["field"] == "model.weights"
    assert "at most 4096 characters" in detail["rule"]


@pytest.fixture(params=["sqlite", "postgresql"])
def on_each_database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A service on SQLite, or on a fresh PostgreSQL database (which refuses a NUL in a
    string outright), and a token of it."""
    if request.param == "sqlite":
        settings = sqlite_settings(tmp_path)
        db = Database(settings.db)
        with TestClient(create_app(settings, db)) as client:
            yield client, bearer(create_token(db, "alice", team="a"))
        db.close()
        return
    with postgres_databases(1, "autotune_ids") as (url,):
        settings = settings_for(
            tmp_path, url, f"sqlite:///{tmp_path / 'studies.db'}", f"sqlite:///{tmp_path / 'm.db'}"
        )
        db = Database(settings.db)
        with TestClient(create_app(settings, db)) as client:
            yield client, bearer(create_token(db, "alice", team="a"))
        db.close()


@pytest.mark.parametrize("bad_id", ["nope%00x", "%00", "a" * 5000, "0" * 31 + "%00"])
def test_an_id_the_service_never_makes_is_404_on_every_route_that_takes_one(
    on_each_database: tuple[TestClient, dict[str, str]], bad_id: str
) -> None:
    client, alice = on_each_database
    routes = [
        ("GET", f"/v1/jobs/{bad_id}"),
        ("GET", f"/v1/jobs/{bad_id}/result"),
        ("GET", f"/v1/jobs/{bad_id}/pareto"),
        ("DELETE", f"/v1/jobs/{bad_id}"),
        ("GET", f"/v1/watches/{bad_id}"),
        ("DELETE", f"/v1/watches/{bad_id}"),
    ]
    for method, path in routes:
        response = client.request(method, path, headers=alice)
        assert response.status_code == 404, (method, path[:40], response.text[:200])
