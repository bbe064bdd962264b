"""A study whose strategy proposes a configuration it measured already, end to end: the
repeat is answered from the original trial and never measured, and the front, the finalists,
the choice, the tuned file and what MLflow shows hold that configuration once, as the
original trial (the demo's trials 16 and 31)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from autotune.cli import app
from autotune.conclusion.conclude import TuneOutcome
from autotune.core.contract import ArtifactInfo, TrialSpec
from autotune.results import TrialMarks
from autotune.search.budget import SearchBudget
from autotune.search.coordinator import Coordinator, Tuning
from autotune.search.front import front_of
from autotune.search.report import trial_text
from autotune.strategies import make_strategy
from autotune.tracking import PARENT_TAG, TRIAL_TAG, MlflowTracker
from autotune.tracking.mlflow import NOTE_TAG
from autotune.tuning import search_then_conclude
from tests.conclusion_support import Comparing
from tests.conftest import copy_mlflow_store
from tests.coordinator_support import (
    BASELINE,
    INFO,
    PROFILE,
    STUDY,
    WORKLOAD,
    RecordingObserver,
    ScriptedExecutor,
    config_with,
    deadline,
    make_request,
    open_store,
    small_space,
)

EIGHT = config_with(batch__size=8)
ORIGINAL, REPEAT = 1, 2
ROUNDS = make_request(trials=3).validation.rounds
SLOW = [1.0 + 0.01 * i for i in range(ROUNDS)]
FAST = [0.5 + 0.01 * i for i in range(ROUNDS)]
# Had the repeat been a finalist, its rounds would have been a hair faster than the
# original's by noise, and it would have been chosen, as the demo's #31 was.
FASTER_BY_NOISE = [p - 0.001 for p in FAST]
runner = CliRunner()


class MeasuresAndCompares(ScriptedExecutor):
    """Trials answered from the script; head-to-head rounds as `Comparing` scripts them, and
    an export that writes a small file."""

    def __init__(self, rounds: dict[int, list[float]]) -> None:
        super().__init__()
        self.comparing = Comparing(rounds)
        self.entrants: list[list[int]] = []
        self.lines: list[str] = []  # the search's trial lines, as the CLI prints them

    def compare(self, spec: Any) -> Any:
        self.entrants.append([e.trial_number for e in spec.entrants])
        return self.comparing.compare(spec)

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        path = Path(out_dir) / "chosen.json"
        path.write_text("{}")
        return ArtifactInfo(path=str(path), format="json", sha256="0" * 64)


def storage(directory: Path) -> str:
    return f"sqlite:///{directory / 'study.db'}"


def tuned_with_a_repeat(
    uri: str, directory: Path
) -> tuple[TuneOutcome, Coordinator, MeasuresAndCompares]:
    """The baseline, then EIGHT proposed twice: measured once, answered once."""
    space = small_space()
    request = make_request(trials=3)
    strategy = make_strategy("autotune", space, request, 0)
    store = open_store(request, strategy, space, storage(directory))
    executor = MeasuresAndCompares({0: SLOW, ORIGINAL: FAST, REPEAT: FASTER_BY_NOISE})
    tracker = MlflowTracker(uri, "tests", STUDY)
    tuning = Tuning(request, WORKLOAD, INFO, space, PROFILE, directory / "artifacts")
    observed = RecordingObserver()
    budget = SearchBudget(3, None)
    coordinator = Coordinator(
        tuning, store, strategy, executor, tracker, budget, observers=[observed]
    )
    store.enqueue(space, BASELINE, TrialMarks(baseline=True))
    store.enqueue(space, EIGHT, TrialMarks())
    store.enqueue(space, EIGHT, TrialMarks())
    with deadline(30.0):
        outcome = search_then_conclude(coordinator)
    executor.lines = [trial_text(trial.shown) for trial in observed.trials]
    return outcome, coordinator, executor


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("once")


@pytest.fixture(scope="module")
def uri(directory: Path, mlflow_store_template: Path) -> str:
    return copy_mlflow_store(mlflow_store_template, directory / "mlflow.db")


@pytest.fixture(scope="module")
def tuned(uri: str, directory: Path) -> tuple[TuneOutcome, Coordinator, MeasuresAndCompares]:
    """One study for every test here: it is the same whatever they read of it."""
    return tuned_with_a_repeat(uri, directory)


def test_the_repeat_is_answered_from_the_original_and_never_measured(tuned: Any) -> None:
    _, coordinator, executor = tuned
    assert executor.measured_configs() == [BASELINE, EIGHT]
    repeat = coordinator.store.records()[REPEAT]
    assert (repeat.config, repeat.measured) == (EIGHT, False)
    assert repeat.repeat_of(STUDY) == ORIGINAL
    line = executor.lines[REPEAT]
    assert line.startswith(f"trial {REPEAT}: ok, p95 ")
    assert line.endswith(f": repeat of trial {ORIGINAL}, not measured again")
    assert "repeat" not in executor.lines[ORIGINAL]


def test_the_front_and_the_finalists_hold_the_configuration_once(tuned: Any) -> None:
    outcome, coordinator, executor = tuned
    assert [c.trial_number for c in outcome.candidates] == [0, ORIGINAL]
    assert sorted(c.trial_number for c in outcome.front) == [0, ORIGINAL]
    assert [c.trial_number for c in front_of(coordinator.store)] == [0, ORIGINAL]
    assert sorted(coordinator.state.completed) == [0, ORIGINAL]
    assert all(REPEAT not in entrants for entrants in executor.entrants)
    assert outcome.tuned is not None
    report = outcome.tuned.revalidation
    finalists = [row["trial"] for comparison in report["comparisons"] for row in comparison]
    assert finalists == [0, ORIGINAL]  # the baseline is on the front too
    assert REPEAT not in report["tied_with"]


def test_the_chosen_trial_is_the_original(tuned: Any) -> None:
    outcome, _, _ = tuned
    assert outcome.tuned is not None
    assert outcome.tuned.study["trial_number"] == ORIGINAL
    assert outcome.tuned.revalidation["chosen"] == ORIGINAL
    assert outcome.tuned.config == EIGHT
    rounds = outcome.tuned.revalidation["rounds"]
    assert rounds > 0
    assert outcome.tuned.metrics_from is not None
    assert outcome.tuned.metrics_from.startswith("the head-to-head: the chosen configuration")
    assert f"(trial {ORIGINAL}) and the unmodified model timed in {rounds} paired rounds" in (
        outcome.tuned.metrics_from
    )


def test_autotune_report_lists_the_configuration_once(tuned: Any, directory: Path) -> None:
    args = ["report", STUDY, "--storage", storage(directory)]
    listed = runner.invoke(app, [*args, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [row["trial"] for row in json.loads(listed.output)] == [0, ORIGINAL]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    trials = [line.split()[0] for line in table.output.splitlines() if line.strip()[:1].isdigit()]
    assert sorted(trials) == ["0b", f"{ORIGINAL}*"]  # the chosen one is the original


def test_mlflow_lists_the_configuration_once_and_the_repeat_as_a_repeat(
    tuned: Any, uri: str, tmp_path: Path
) -> None:
    outcome, _, _ = tuned
    assert outcome.tuned is not None
    client = MlflowClient(uri)
    parent = outcome.tuned.mlflow["run_id"]
    note = client.get_run(parent).data.tags[NOTE_TAG]
    assert f"**#{ORIGINAL}**" in note and f"#{REPEAT}" not in note
    front_csv = Path(client.download_artifacts(parent, "pareto/pareto_front.csv", str(tmp_path)))
    trials_csv = Path(client.download_artifacts(parent, "pareto/all_trials.csv", str(tmp_path)))
    for table in (front_csv, trials_csv):
        rows = [line.split(",")[0] for line in table.read_text().splitlines()[1:]]
        assert rows == ["0", str(ORIGINAL)]
    report = Path(client.download_artifacts(parent, "pareto/pareto_report.html", str(tmp_path)))
    assert "2 measured configurations" in report.read_text()

    runs = client.search_runs(
        [outcome.tuned.mlflow["experiment_id"]], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'"
    )
    by_number = {int(r.data.tags[TRIAL_TAG]): r for r in runs}
    repeat = by_number[REPEAT]
    assert repeat.info.run_name == f"trial-{REPEAT} (repeat of #{ORIGINAL})"
    assert repeat.info.status == "FINISHED"
    assert repeat.data.metrics == {}  # not a point of its own in the runs table's charts
    assert repeat.data.tags["pareto"] == "false" and repeat.data.tags["chosen"] == "false"
    original = by_number[ORIGINAL]
    assert original.data.tags["chosen"] == "true"
    # The head-to-head's re-measurement is told on the original's run, with its rounds.
    assert original.data.metrics["revalidated.rounds"] == ROUNDS
    assert "revalidated" not in repeat.data.tags
