"""What a tenant sees of the service's stores: nothing. A job tuned with its studies and its
MLflow runs on PostgreSQL, and a job whose runner's error names the study storage, are read
through every route; no body names a store's URL, user, password, host, port or database
(a URL is shown as its scheme only)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy
from fastapi.testclient import TestClient

from autotune.service import Database, JobRunner, JobStore, create_app
from autotune.service.tokens import create_token
from tests.conftest import ADMIN_URL, postgres_databases
from tests.service_fixtures import bearer
from tests.service_support import service_request, settings_for

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@dataclass
class Served:
    client: TestClient
    headers: dict[str, str]
    tuned: str  # a job that succeeded
    failed: str  # a job whose runner's error names the study storage
    secrets: list[str]  # what no answer may contain


@contextmanager
def store_user() -> Iterator[tuple[str, str]]:
    """A PostgreSQL role of its own (a name and a password found nowhere else), dropped
    afterwards."""
    name, password = f"at_store_{uuid.uuid4().hex[:8]}", f"pw{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'"))
        yield name, password
    finally:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(f"DROP ROLE IF EXISTS {name}"))
        engine.dispose()


def owned_by(url: str, user: str, password: str) -> str:
    """The database at `url`, handed to `user`, and its URL as that user."""
    parsed = sqlalchemy.make_url(url)
    engine = sqlalchemy.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text(f"ALTER DATABASE {parsed.database} OWNER TO {user}"))
    engine.dispose()
    return parsed.set(username=user, password=password).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp_path: Path = tmp_path_factory.mktemp("stores")
    with store_user() as (user, password), postgres_databases(2, "at_urls") as databases:
        studies, mlflow = (owned_by(url, user, password) for url in databases)
        settings = settings_for(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", studies, mlflow)
        db = Database(settings.db)
        headers = bearer(create_token(db, "tenant", team="a"))
        with TestClient(create_app(settings, db)) as client:
            tuned = client.post("/v1/jobs", json=service_request(), headers=headers).json()["id"]
            assert JobRunner(db, settings).run_once() == tuned
            failing = service_request(name="unlucky")
            failed = client.post("/v1/jobs", json=failing, headers=headers).json()["id"]
            store = JobStore(db)
            assert store.claim("runner-x", 60).id == failed  # type: ignore[union-attr]
            # What a runner would record of a storage that stopped answering.
            error = f"study storage: must answer (got {studies!r}: connection refused)"
            store.finish(failed, "runner-x", "failed", error=error)
            host = sqlalchemy.make_url(studies)
            names = [sqlalchemy.make_url(url).database or "" for url in (studies, mlflow)]
            secrets = [studies, mlflow, user, password, *names, f"{host.host}:{host.port}"]
            yield Served(client, headers, tuned, failed, secrets)
        db.close()


def routes(served: Served) -> list[tuple[str, str]]:
    tuned, failed = served.tuned, served.failed
    return [
        ("GET", "/v1/jobs"),
        *[("GET", f"/v1/jobs/{job}{tail}") for job in (tuned, failed) for tail in ("", "/result")],
        ("GET", f"/v1/jobs/{tuned}/pareto"),
        ("DELETE", f"/v1/jobs/{tuned}"),
        ("DELETE", f"/v1/jobs/{failed}"),
        ("GET", "/v1/watches"),
        ("GET", "/healthz"),
    ]


def test_no_answer_names_a_store(served: Served) -> None:
    answers = {
        f"{method} {path}": served.client.request(method, path, headers=served.headers)
        for method, path in routes(served)
    }
    tuned = answers[f"GET /v1/jobs/{served.tuned}"].json()
    assert tuned["state"] == "succeeded", tuned["error"]
    for route, answer in answers.items():
        for secret in served.secrets:
            assert secret not in answer.text, (route, secret, answer.text)


def test_a_store_url_is_shown_as_its_scheme(served: Served) -> None:
    result = served.client.get(f"/v1/jobs/{served.tuned}/result", headers=served.headers)
    assert result.status_code == 200, result.text
    shown = result.json()
    assert shown["study"]["storage"] == "postgresql+psycopg://…"
    assert shown["mlflow"]["tracking_uri"] == "postgresql+psycopg://…"
    assert shown["mlflow"]["run_id"]  # what the tenant may know of its runs
    failed = served.client.get(f"/v1/jobs/{served.failed}", headers=served.headers).json()
    assert failed["error"] == (
        "study storage: must answer (got 'postgresql+psycopg://…': connection refused)"
    )
