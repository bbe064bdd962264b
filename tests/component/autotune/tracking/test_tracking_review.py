"""What MLflow's tracker sets for a person reviewing a study in MLflow's UI: the trials' marks,
names and colours, their rounded figures, and the experiment's saved view and description."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from autotune.results.records import Candidate
from autotune.tracking import PARENT_TAG, TRIAL_TAG, MlflowTracker
from autotune.tracking.review import BASELINE_COLOUR, CHOSEN_COLOUR, KINDS, STUDY_COLOUR
from autotune.tracking.view import VIEW_TAG_PREFIX, view_id, view_link
from tests.review_study import CANDIDATES, OBJECTIVE_METRICS, REQUEST


@pytest.fixture
def trackers(mlflow_uri: str) -> Iterator[Any]:
    made: list[MlflowTracker] = []

    def make() -> MlflowTracker:
        made.append(MlflowTracker(mlflow_uri, "review", "digits"))
        return made[-1]

    yield make
    for tracker in made:
        if not tracker.closed:
            tracker.finish("KILLED")


def study_round(tracker: MlflowTracker, chosen: int, candidates: list[Candidate]) -> None:
    tracker.log_study_inputs({}, {"request.yaml": REQUEST}, {})
    for c in candidates:
        tracker.log_trial(c.trial_number, 0, c.config, c.metrics, {})
    tracker.log_trial(9, 0, {"batch.size": 1}, None, {"status": "failed"})
    front = [c for c in candidates if c.feasible and c.trial_number in (1, 2)]
    tags = {"baseline_trial": "0", "chosen_trial": str(chosen)}
    tracker.log_results(candidates, front, OBJECTIVE_METRICS, {}, {}, None, tags)
    tracker.finish("FINISHED")


def runs(tracker: MlflowTracker) -> dict[int, Any]:
    found = MlflowClient(tracker.tracking_uri).search_runs(
        [tracker.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{tracker.parent_run_id}'"
    )
    return {int(r.data.tags[TRIAL_TAG]): r for r in found}


def test_the_chosen_trial_and_the_baseline_are_named_and_every_trial_coloured(
    trackers: Any,
) -> None:
    tracker = trackers()
    study_round(tracker, 2, CANDIDATES)
    found = runs(tracker)
    names = {n: r.info.run_name for n, r in found.items()}
    assert names == {
        0: "trial-0 (baseline)",
        1: "trial-1",
        2: "trial-2 (chosen)",
        3: "trial-3",
        4: "trial-4",
        9: "trial-9",
    }
    colours = {n: r.data.tags["mlflow.runColor"] for n, r in found.items()}
    assert colours == {
        0: BASELINE_COLOUR,
        1: KINDS["front"][1],
        2: CHOSEN_COLOUR,
        3: KINDS["infeasible"][1],
        4: KINDS["feasible"][1],
        9: KINDS["infeasible"][1],  # failed: no figures
    }
    marks = {n: (r.data.tags["chosen"], r.data.tags["baseline"]) for n, r in found.items()}
    assert marks[2] == ("true", "false") and marks[0] == ("false", "true")
    assert found[1].data.tags["pareto"] == "true" and found[4].data.tags["pareto"] == "false"
    assert found[2].data.metrics["rounded/accuracy_drop"] == 0.01


def test_a_later_round_s_choice_moves_the_names(trackers: Any) -> None:
    study_round(trackers(), 2, CANDIDATES)
    again = trackers()  # the study resumed: a new round of the same parent run
    study_round(again, 1, CANDIDATES)
    names = {n: r.info.run_name for n, r in runs(again).items()}
    assert (names[1], names[2], names[0]) == ("trial-1 (chosen)", "trial-2", "trial-0 (baseline)")
    kept = trackers()
    study_round(kept, 0, CANDIDATES)  # the unmodified model kept
    names = {n: r.info.run_name for n, r in runs(kept).items()}
    assert (names[0], names[1]) == ("trial-0 (chosen, baseline)", "trial-1")


def test_the_experiment_carries_the_view_and_a_description_that_links_to_it(
    trackers: Any,
) -> None:
    tracker = trackers()
    study_round(tracker, 2, CANDIDATES)
    client = MlflowClient(tracker.tracking_uri)
    tags = client.get_experiment(tracker.experiment_id).tags
    assert VIEW_TAG_PREFIX + view_id("digits") in tags
    assert tags["mlflow.experiment.primaryMetric.name"] == "latency_p95_ms"  # lowest_latency
    description = tags["mlflow.note.content"]
    assert description.startswith("autotune study digits: [every trial with its figures](")
    assert view_link(tracker.experiment_id, "digits") in description
    parent = client.get_run(tracker.parent_run_id).data.tags
    assert parent["mlflow.runColor"] == STUDY_COLOUR  # none of the trials' colours
    parent_note = parent["mlflow.note.content"]
    assert f"[every trial with its figures]({view_link(tracker.experiment_id, 'digits')})" in (
        parent_note
    )
