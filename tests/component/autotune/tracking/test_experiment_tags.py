"""The experiment's tags when several studies write them at once: kinds tuned at once in one
process each keep their link in the description, and a tag another process created in the
same moment is updated instead of failing the study."""

from __future__ import annotations

import threading
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from autotune.tracking import MlflowTracker
from autotune.tracking.experiment_tags import set_experiment_tag
from autotune.tracking.mlflow import NOTE_TAG
from tests.review_study import OBJECTIVE_METRICS

STUDIES = [f"kind-{n}" for n in range(6)]


def test_studies_concluding_at_once_each_keep_their_link(mlflow_uri: str) -> None:
    trackers = [MlflowTracker(mlflow_uri, "tests", study) for study in STUDIES]
    start = threading.Barrier(len(trackers))
    failures: list[BaseException] = []

    def review(tracker: MlflowTracker) -> None:
        start.wait()
        try:
            links = [("the study's run", f"#/runs/{tracker.parent_run_id}")]
            tracker._log_experiment_review(OBJECTIVE_METRICS, links)
        except BaseException as error:  # noqa: BLE001  (reported below)
            failures.append(error)

    threads = [threading.Thread(target=review, args=(t,)) for t in trackers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for tracker in trackers:
        tracker.finish("FINISHED")

    assert not failures, failures
    note = MlflowClient(mlflow_uri).get_experiment(trackers[0].experiment_id).tags[NOTE_TAG]
    for tracker in trackers:
        assert f"#/runs/{tracker.parent_run_id}" in note, tracker.study


class CollidingClient:
    """A client whose first insert of a tag collides with another process's."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self.calls.append((experiment_id, key, value))
        if len(self.calls) == 1:
            raise MlflowException("UNIQUE constraint failed: experiment_tags.key")


def test_a_tag_created_elsewhere_in_the_same_moment_is_set_again() -> None:
    client: Any = CollidingClient()
    set_experiment_tag(client, "7", "mlflow.note.content", "text")
    assert client.calls == [("7", "mlflow.note.content", "text")] * 2
