"""The service's survey of its trial nodes, kept warm in the background while the API runs:
requests are answered from it, and one that comes first waits for it rather than surveying
again."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import AutotuneError
from autotune.service.settings import HardwareSurvey
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR
from tests.autotune.service.support import wait_for

PROFILES = SPACES_DIR / "profiles"


class HeldNodes:
    """A survey that waits for the test to let it answer (or to fail)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[str] = []
        self.failure: Exception | None = None

    def kinds(self) -> list[NodeKind]:
        self.threads.append(threading.current_thread().name)
        self.release.wait(60)
        if self.failure is not None:
            raise self.failure
        node = NodeInfo(node_id="n1", hostname="gpu-1", cpus=8, gpus=1, slots=1)
        return [NodeKind(profile=load_profile(PROFILES / "a100.json"), nodes=[node])]


@pytest.fixture
def nodes() -> Iterator[HeldNodes]:
    held = HeldNodes()
    yield held
    held.release.set()


def test_a_request_during_the_survey_made_at_start_waits_for_it(nodes: HeldNodes) -> None:
    survey = HardwareSurvey(nodes.kinds, ttl_s=3600)
    stop = survey.keep_warm()
    try:
        wait_for(lambda: nodes.threads, 30, "the survey made at start")
        answers: list[list[NodeKind]] = []
        request = threading.Thread(target=lambda: answers.append(survey.kinds()))
        request.start()
        nodes.release.set()
        request.join(60)
        assert answers and answers[0][0].nodes[0].hostname == "gpu-1"
        assert survey.kinds() == answers[0]
        assert nodes.threads == ["hardware-survey"]
    finally:
        stop()


def test_a_background_survey_that_fails_leaves_a_request_to_say_why(
    nodes: HeldNodes, caplog: pytest.LogCaptureFixture
) -> None:
    nodes.failure = AutotuneError("the Ray cluster has no alive node that offers CPUs to trials")
    nodes.release.set()
    survey = HardwareSurvey(nodes.kinds, ttl_s=3600)
    stop = survey.keep_warm()
    try:
        wait_for(lambda: "surveying" in caplog.text, 30, "the failed survey to be logged")
        with pytest.raises(AutotuneError, match="no alive node"):
            survey.kinds()
        assert nodes.threads == ["hardware-survey", "MainThread"]
    finally:
        stop()
