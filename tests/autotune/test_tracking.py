"""MLflow's tracker: where it keeps artifacts, and its background writer of trial runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from autotune.tracking import (
    PARENT_TAG,
    TRIAL_TAG,
    MlflowTracker,
    artifact_location,
)

CONFIG = {"batch_size": 8, "shape": [1, 3]}
METRICS = {"latency_p95_ms": 3.5, "accuracy": 0.9, "energy_source": "estimate"}


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture
def tracker(uri: str) -> Iterator[MlflowTracker]:
    made = MlflowTracker(uri, "tests", "study")
    yield made
    if not made.closed:
        made.finish("KILLED")


def child_runs(uri: str, tracker: MlflowTracker) -> dict[int, Any]:
    runs = MlflowClient(uri).search_runs(
        [tracker.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{tracker.parent_run_id}'"
    )
    return {int(run.data.tags[TRIAL_TAG]): run for run in runs}


def wrap_create_run(tracker: MlflowTracker, before: Callable[[str], object]) -> None:
    """Call `before(run name)` ahead of each child run the tracker creates."""
    create_run = tracker.client.create_run

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before(kwargs["run_name"])
        return create_run(*args, **kwargs)

    tracker.client.create_run = wrapped  # type: ignore[method-assign]


def test_a_sqlite_stores_artifacts_live_beside_it_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    tracker = MlflowTracker(uri, "tests", "study")
    location = MlflowClient(uri).get_experiment(tracker.experiment_id).artifact_location
    assert location == (tmp_path / "store" / "mlruns").as_uri()
    assert not (elsewhere / "mlruns").exists()


def test_a_relative_sqlite_path_and_other_stores() -> None:
    assert artifact_location("sqlite:///mlflow.db") == (Path.cwd() / "mlruns").as_uri()
    assert artifact_location("postgresql+psycopg://u@h/db") is None
    assert artifact_location("http://127.0.0.1:5000") is None


def test_log_trial_returns_before_the_run_is_written(uri: str, tracker: MlflowTracker) -> None:
    store_may_write = threading.Event()
    wrap_create_run(tracker, lambda _: store_may_write.wait(timeout=30))

    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(0, 1, CONFIG, METRICS, {})  # queued, not yet written: not logged again
    assert child_runs(uri, tracker) == {}

    store_may_write.set()
    tracker.flush()
    assert list(child_runs(uri, tracker)) == [0]


def test_a_trial_run_holds_what_was_logged_when_it_was_logged(
    uri: str, tracker: MlflowTracker
) -> None:
    config = dict(CONFIG)
    before = int(time.time() * 1000)
    tracker.log_trial(3, 2, config, METRICS, {"contended": "false"})
    tracker.log_trial(4, 0, config, None, {"failure": "out of memory"})
    config["batch_size"] = 99  # the caller's dict changes after the call
    tracker.flush()

    runs = child_runs(uri, tracker)
    measured, failed = runs[3], runs[4]
    assert measured.info.status == "FINISHED"
    assert measured.info.run_name == "trial-3"
    assert measured.data.params == {"batch_size": "8", "shape": "[1, 3]"}
    assert measured.data.metrics == {"latency_p95_ms": 3.5, "accuracy": 0.9}
    assert measured.data.tags["energy_source"] == "estimate"
    assert measured.data.tags["autotune.attempt"] == "2"
    assert measured.data.tags["contended"] == "false"
    assert before <= measured.info.start_time == measured.info.end_time
    assert failed.info.status == "FAILED"
    assert failed.data.tags["failure"] == "out of memory"
    assert failed.data.metrics == {}


def test_runs_are_written_in_the_order_trials_were_logged(tracker: MlflowTracker) -> None:
    written: list[str] = []
    wrap_create_run(tracker, written.append)
    for number in (5, 2, 9, 0):
        tracker.log_trial(number, 0, CONFIG, METRICS, {})
    tracker.flush()
    assert written == ["trial-5", "trial-2", "trial-9", "trial-0"]


def test_a_failed_write_is_raised_by_the_next_flush_and_the_others_are_written(
    uri: str, tracker: MlflowTracker
) -> None:
    def refuse_trial_1(run_name: str) -> None:
        if run_name == "trial-1":
            raise ConnectionError("store unreachable")

    wrap_create_run(tracker, refuse_trial_1)
    for number in range(3):
        tracker.log_trial(number, 0, CONFIG, METRICS, {})

    with pytest.raises(ConnectionError, match="store unreachable"):
        tracker.flush()
    assert sorted(child_runs(uri, tracker)) == [0, 2]
    tracker.flush()  # raised once


def test_finish_raises_a_failed_write_after_ending_the_parent_run(
    uri: str, tracker: MlflowTracker
) -> None:
    def refuse(run_name: str) -> None:
        raise ConnectionError(f"{run_name} refused")

    wrap_create_run(tracker, refuse)
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(1, 0, CONFIG, METRICS, {})

    with pytest.raises(ConnectionError, match="trial-0 refused") as raised:
        tracker.finish("FINISHED")
    assert raised.value.__notes__ == ["1 later deferred writes failed too"]
    assert MlflowClient(uri).get_run(tracker.parent_run_id).info.status == "FINISHED"
    assert not tracker.writing


def test_revalidation_tags_runs_still_queued_when_it_is_called(
    uri: str, tracker: MlflowTracker
) -> None:
    wrap_create_run(tracker, lambda _: time.sleep(0.2))
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    tracker.log_trial(1, 0, CONFIG, METRICS, {})
    report = {"comparisons": [[{"trial": 1, "revalidated": {"latency_p95_ms": 3.0}}]]}
    tracker.log_revalidation(report)

    finalist = child_runs(uri, tracker)[1]
    assert finalist.data.tags["revalidated"] == "true"
    assert finalist.data.metrics["revalidated.latency_p95_ms"] == 3.0


def test_finish_leaves_no_writer_thread_running(tracker: MlflowTracker) -> None:
    tracker.log_trial(0, 0, CONFIG, METRICS, {})
    assert tracker.writing
    tracker.finish("FINISHED")
    assert not tracker.writing
    assert not [t for t in threading.enumerate() if t.name.startswith("mlflow-writer-")]
