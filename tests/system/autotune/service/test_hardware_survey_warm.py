"""On a Ray cluster, a survey of the trial nodes costs seconds (Ray's start, a probe on each
node): the API surveys them in the background as it starts, and its first answers that need
the kinds of node (a submission's dedupe key, a target that names no kind) come from that
survey, not from one of their own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from autotune.core.contract import NodeKind
from autotune.execution import ray_executor
from autotune.service import Database, create_app
from autotune.service.tokens import create_token
from tests.ray_nodes import LocalRayCluster, head_only
from tests.service_fixtures import bearer
from tests.service_support import service_request, sqlite_settings, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRayCluster]:
    """A head that runs no trials and one worker node; this process joins it (so without
    token authentication: this process's Ray may have read its settings already)."""
    with head_only(tmp_path / "nodes", token_auth=False) as started:
        started.add_node("worker", [0])
        monkeypatch.setenv("RAY_TMPDIR", started.env["RAY_TMPDIR"])
        yield started


class CountedSurveys:
    """The executor's survey of the cluster, as the service calls it, counted."""

    def __init__(self) -> None:
        self.threads: list[str] = []  # the thread each survey ran on
        self.done = 0
        self._survey = ray_executor.survey_kinds

    def __call__(self, *args: object) -> list[NodeKind]:
        self.threads.append(threading.current_thread().name)
        kinds = self._survey(*args)  # type: ignore[arg-type]
        self.done += 1
        return kinds


def test_the_first_answers_come_from_the_survey_made_at_start(
    cluster: LocalRayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    surveys = CountedSurveys()
    monkeypatch.setattr(ray_executor, "survey_kinds", surveys)
    settings = sqlite_settings(
        tmp_path, executor="ray", ray_address=cluster.address, hardware_ttl_s=3600.0
    )
    db = Database(settings.db)
    alice = bearer(create_token(db, "alice", team="a"))
    with TestClient(create_app(settings, db)) as client:
        wait_for(lambda: surveys.done, 300, "the survey made as the API starts")

        nowhere = client.post(
            "/v1/jobs", json=service_request(target="zone=nowhere"), headers=alice
        )
        assert nowhere.status_code == 422, nowhere.text
        assert nowhere.json()["detail"]["field"] == "target"
        submitted = client.post("/v1/jobs", json=service_request(), headers=alice)
        assert submitted.status_code == 202, submitted.text
        assert surveys.threads == ["hardware-survey"]
    db.close()
