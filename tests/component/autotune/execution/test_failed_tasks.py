"""A trial whose Ray task fails outside the worker's own handling: its reason stays one line,
and Ray's text of the failure (the remote traceback) comes back as the result's traceback.

The exceptions are Ray's own, built as a Ray worker builds them; no cluster is started."""

from __future__ import annotations

import traceback
from typing import Any

import ray.exceptions

from autotune.core.contract import MAX_TRACEBACK_CHARS, TrialResult, TrialSpec
from autotune.execution.ray_executor import RayExecutor
from autotune.execution.ray_slots import Running
from tests.coordinator_support import WORKLOAD


class RayWhoseTaskFailed:
    """What `_collect` asks of Ray: `get` raises the task's error."""

    exceptions = ray.exceptions

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get(self, ref: Any) -> Any:
        raise self.error


def collected(error: BaseException) -> TrialResult:
    spec = TrialSpec(study="s", trial_number=4, workload=WORKLOAD, config={"batch.size": 8})
    executor = object.__new__(RayExecutor)
    executor._ray = RayWhoseTaskFailed(error)
    executor._running = {"ref": Running(actor=None, spec=spec, started=0.0)}
    return executor._collect("ref")


def load_weights(message: str) -> None:
    raise ValueError(message)


def task_error(message: str) -> ray.exceptions.RayTaskError:
    """A RayTaskError as a Ray worker makes it of what its task raised."""
    try:
        load_weights(message)
    except ValueError as cause:
        return ray.exceptions.RayTaskError(
            "TrialWorker.run",
            traceback.format_exc(),
            cause,
            proctitle="ray::TrialWorker.run",
            pid=4242,
            ip="10.0.0.7",
            actor_id="a1" * 16,
        )
    raise AssertionError("load_weights raised nothing")


def remote_error(message: str) -> ray.exceptions.RayTaskError:
    """A RayTaskError as `ray.get` raises it: an instance of the cause's class as well."""
    return task_error(message).as_instanceof_cause()


def test_an_actor_that_raised_keeps_its_remote_traceback_and_a_one_line_reason() -> None:
    result = collected(remote_error("no weights in /models/a.pt\nsecond line"))

    assert result.status == "error"
    assert result.reason == "worker raised: RayTaskError(ValueError): no weights in /models/a.pt"
    assert result.traceback is not None
    assert "in load_weights" in result.traceback
    assert result.traceback.rstrip().endswith("ValueError: no weights in /models/a.pt\nsecond line")
    assert "pid=4242, ip=10.0.0.7" in result.traceback
    assert "\x1b[" not in result.traceback, "Ray's terminal colours are left out"


def test_a_long_remote_traceback_keeps_its_tail() -> None:
    result = collected(remote_error("x" * (2 * MAX_TRACEBACK_CHARS) + " the end"))

    assert result.traceback is not None and len(result.traceback) == MAX_TRACEBACK_CHARS
    assert result.traceback.endswith(" the end")


def test_a_worker_that_died_keeps_the_text_ray_gives() -> None:
    """An actor whose start raised dies with Ray's account of why."""
    died = ray.exceptions.ActorDiedError(cause=task_error("cannot pin cores 4-7"))

    result = collected(died)

    assert result.status == "lost"
    assert result.reason is not None and "\n" not in result.reason
    assert result.reason.startswith("worker died: ActorDiedError: ")
    assert result.traceback is not None
    assert "ValueError: cannot pin cores 4-7" in result.traceback


def test_a_worker_that_died_with_one_line_keeps_it_in_the_reason() -> None:
    result = collected(ray.exceptions.ActorDiedError())

    assert result.reason == (
        "worker died: ActorDiedError: The actor died unexpectedly before finishing this task."
    )
