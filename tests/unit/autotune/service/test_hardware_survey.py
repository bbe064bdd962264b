"""The service's survey of its trial nodes: warmed in the background as the API starts, and
renewed in the background while requests use it, so that a request is answered from it
rather than waiting for a survey of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import AutotuneError
from autotune.service.settings import HardwareSurvey
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR
from tests.service_support import wait_for

PROFILES = SPACES_DIR / "profiles"


class HeldNodes:
    """A survey that answers (or fails) once the test lets it; `threads` names the thread
    each survey ran on, `done` counts those that answered."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[str] = []
        self.done = 0
        self.failure: Exception | None = None

    def kinds(self) -> list[NodeKind]:
        self.threads.append(threading.current_thread().name)
        self.release.wait(60)
        if self.failure is not None:
            raise self.failure
        node = NodeInfo(node_id="n1", hostname="gpu-1", cpus=8, gpus=1, slots=1)
        self.done += 1
        return [NodeKind(profile=load_profile(PROFILES / "a100.json"), nodes=[node])]


class Clock:
    """time.monotonic, as the survey reads it, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def no_survey_under_way() -> bool:
    return not any(thread.name == "hardware-survey" for thread in threading.enumerate())


@pytest.fixture
def nodes() -> Iterator[HeldNodes]:
    held = HeldNodes()
    yield held
    held.release.set()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr("autotune.service.settings.time", moved)
    return moved


def test_a_request_during_the_warming_survey_waits_for_it(nodes: HeldNodes) -> None:
    survey = HardwareSurvey(nodes.kinds, ttl_s=3600)
    survey.warm()
    wait_for(lambda: nodes.threads, 30, "the warming survey")
    answers: list[list[NodeKind]] = []
    request = threading.Thread(target=lambda: answers.append(survey.kinds()))
    request.start()
    nodes.release.set()
    request.join(60)
    assert answers and answers[0][0].nodes[0].hostname == "gpu-1"
    assert survey.kinds() == answers[0]
    assert nodes.threads == ["hardware-survey"]


def test_an_answer_past_half_its_life_is_used_and_renewed_in_the_background(
    nodes: HeldNodes, clock: Clock
) -> None:
    nodes.release.set()
    survey = HardwareSurvey(nodes.kinds, ttl_s=60)
    first = survey.kinds()
    clock.now += 29
    assert survey.kinds() == first and nodes.threads == ["MainThread"]
    clock.now += 2  # 31 s old: still answers, and the next survey starts
    assert survey.kinds() == first
    wait_for(no_survey_under_way, 30, "the survey in the background")
    assert nodes.threads == ["MainThread", "hardware-survey"]
    clock.now += 59  # 59 s after the renewal: fresh
    survey.kinds()
    wait_for(no_survey_under_way, 30, "the next survey in the background")
    clock.now += 120  # idle for longer than its life: the request surveys
    survey.kinds()
    assert nodes.threads == ["MainThread", "hardware-survey", "hardware-survey", "MainThread"]
    assert nodes.done == 4


def test_a_background_survey_that_fails_leaves_a_request_to_say_why(
    nodes: HeldNodes, caplog: pytest.LogCaptureFixture
) -> None:
    nodes.failure = AutotuneError("the Ray cluster has no alive node that offers CPUs to trials")
    nodes.release.set()
    survey = HardwareSurvey(nodes.kinds, ttl_s=3600)
    survey.warm()
    wait_for(lambda: "surveying" in caplog.text, 30, "the failed survey to be logged")
    with pytest.raises(AutotuneError, match="no alive node"):
        survey.kinds()
    assert nodes.threads == ["hardware-survey", "MainThread"]
