"""Warm-started re-tuning on the real digits workload, in-process: a cold study, then re-tunes
of the same model, of changed weights and on (recorded as) other hardware."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from autotune.conclusion.conclude import TuneOutcome
from autotune.core.contract import TrialSpec
from autotune.core.errors import RequestError
from autotune.core.knobs import variant_key
from autotune.core.metrics import OBJECTIVES, Direction, Metric
from autotune.execution import built_in
from autotune.execution.in_process import InProcessExecutor
from autotune.results import TrialRecord
from autotune.results.records import Candidate
from autotune.search.front import dominates
from autotune.search.warm_start import PreviousTrial, WarmStart, load_warm_start, selection_order
from autotune.space.search_space import effective_space, load_space, resolve_space_path
from autotune.tracking import PARENT_TAG, TRIAL_TAG
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import FAST_MEASUREMENT, REPO, digits_request, stored_trials
from workers.building.probe import probe

COLD = "digits-cold"
RETUNE = "digits-retune"
# Every measurement here counts as quiet, however busy the machine: a contended one is measured
# again rather than reused (test_a_measurement_taken_on_a_busy_machine_is_not_reused), which
# would make what these tests expect depend on the machine's load.
MEASUREMENT = {**FAST_MEASUREMENT, "contention_threshold": 1.0}


@dataclass(frozen=True)
class ColdStudy:
    database: Path
    outcome: TuneOutcome


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> ColdStudy:
    """One cold study, copied by every test that re-tunes from it. Its 8 trials come from
    TPE's random start, spread over batch sizes, so its front has a point besides the baseline
    even where most of its int8 and pruned trials fail the accuracy bound (which ones do
    depends on the CPU); autotune's designed set holds the batch size still and can leave a
    front of one."""
    root = tmp_path_factory.mktemp("cold")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.syspath_prepend(str(REPO))
        path = root / "request.yaml"
        path.write_text(
            yaml.safe_dump(
                digits_request(root, name=COLD, budget={"trials": 8}, measurement=MEASUREMENT)
            )
        )
        outcome, _ = run_tune(path, TuneOptions(executor="inprocess", seed=0, sampler="tpe"))
    return ColdStudy(root / "study.db", outcome)


@pytest.fixture
def write_request(write_request: Any) -> Any:
    """The shared request writer, measuring as the cold study did."""

    def write(**overrides: Any) -> Path:
        return write_request(**{"measurement": MEASUREMENT, **overrides})

    return write


@pytest.fixture
def storage(cold: ColdStudy, tmp_path: Path) -> str:
    """This test's copy of the cold study's database; re-tunes add their studies to it."""
    shutil.copy(cold.database, tmp_path / "study.db")
    return f"sqlite:///{tmp_path / 'study.db'}"


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[TrialSpec]:
    """Every trial spec the in-process executor is handed, in order (the finalists' head-to-head
    is not a submission)."""
    specs: list[TrialSpec] = []

    class Recording(InProcessExecutor):
        def submit(self, spec: TrialSpec) -> None:
            specs.append(spec)
            super().submit(spec)

    monkeypatch.setattr(built_in, "InProcessExecutor", Recording)
    return specs


def retune(write_request: Any, warm: WarmStart, trials: int, **request: Any) -> TuneOutcome:
    path = write_request(name=RETUNE, budget={"trials": trials}, **request)
    options = TuneOptions(executor="inprocess", seed=1, warm_start=warm)
    outcome, _ = run_tune(path, options)
    return outcome


def expected_queue(warm: WarmStart, storage: str) -> list[dict[str, Any]]:
    """The front's configurations in order, without the baseline and repeats."""
    baseline = stored_trials(storage, COLD)[0].config
    queue: list[dict[str, Any]] = []
    for config in warm.front:
        if config != baseline and config not in queue:
            queue.append(config)
    return queue


def finished_trials(storage: str) -> list[TrialRecord]:
    return [t for t in stored_trials(storage, RETUNE) if t.ended]


@pytest.mark.slow
def test_same_model_and_hardware_reuses_the_previous_front(
    cold: ColdStudy, storage: str, write_request: Any, submitted: list[TrialSpec]
) -> None:
    warm = load_warm_start(COLD, storage)
    assert warm.front[0] == cold.outcome.tuned.config  # the previous choice comes first
    queue = expected_queue(warm, storage)
    assert queue
    path = write_request(name=RETUNE, budget={"trials": len(queue) + 2})
    previous_tuned = cold.outcome.tuned.model_dump(mode="json")
    options = TuneOptions(
        executor="inprocess", seed=1, warm_start=warm, previous_tuned=previous_tuned
    )
    outcome, _ = run_tune(path, options)

    trials = finished_trials(storage)
    assert trials[0].marks.baseline is True
    assert trials[0].reused_from is None
    assert [t.config for t in trials[1 : len(queue) + 1]] == queue
    cold_trials = stored_trials(storage, COLD)
    for trial in trials[1 : len(queue) + 1]:
        assert trial.marks.warm_start == COLD
        assert trial.measured is False
        assert trial.reused_from is not None
        source = cold_trials[int(trial.reused_from.removeprefix(f"{COLD}#"))]
        assert source.config == trial.config
        assert source.metrics is not None and trial.metrics is not None
        assert trial.metrics["latency_p95_ms"] == source.metrics["latency_p95_ms"]
    reused = {t.number for t in trials if t.reused_from is not None}
    assert reused >= set(range(1, len(queue) + 1))
    measured = {s.trial_number for s in submitted}
    assert measured == {t.number for t in trials} - reused
    assert len(submitted) == len(measured)  # each measured once

    client = MlflowClient(outcome.tuned.mlflow["tracking_uri"])
    runs = client.search_runs(
        [outcome.tuned.mlflow["experiment_id"]],
        filter_string=f"tags.`{PARENT_TAG}` = '{outcome.tuned.mlflow['run_id']}'",
    )
    reused_runs = {int(r.data.tags[TRIAL_TAG]) for r in runs if r.data.tags.get("reused")}
    assert reused_runs == reused

    # The previous choice, with the previous figures where reused (the baseline's are new:
    # every study measures its own), is still feasible, and on the front or beaten.
    chosen = next(c for c in outcome.candidates if c.config == cold.outcome.tuned.config)
    assert chosen.feasible
    objectives = [
        OBJECTIVES[o]
        for o in optuna.load_study(study_name=COLD, storage=storage).user_attrs["objectives"]
    ]
    assert any(
        c.config == chosen.config or _dominates(c, chosen, objectives) for c in outcome.front
    ), "the re-tune's front lost the previous choice without beating it"

    parent = client.get_run(outcome.tuned.mlflow["run_id"])
    assert parent.data.tags["autotune.previous_run_id"] == cold.outcome.tuned.mlflow["run_id"]
    assert parent.data.tags["autotune.warm_start"] == COLD
    local = client.download_artifacts(parent.info.run_id, "comparison.json")
    comparison = json.loads(Path(local).read_text())
    assert comparison["previous"]["study"] == COLD
    assert comparison["current"]["study"] == RETUNE


@pytest.mark.slow
def test_changed_model_starts_from_the_front_but_measures_everything(
    storage: str, write_request: Any, submitted: list[TrialSpec]
) -> None:
    warm = load_warm_start(COLD, storage)
    queue = expected_queue(warm, storage)
    model = {"entry_point": "tests.perturbed_digits:build_model"}
    retune(write_request, warm, len(queue) + 1, model=model)

    trials = finished_trials(storage)
    retuned = optuna.load_study(study_name=RETUNE, storage=storage)
    cold_study = optuna.load_study(study_name=COLD, storage=storage)
    assert retuned.user_attrs["model_sha256"] != cold_study.user_attrs["model_sha256"]
    assert [t.config for t in trials[1 : len(queue) + 1]] == queue
    assert all(t.marks.warm_start == COLD for t in trials[1 : len(queue) + 1])
    assert not [t for t in trials if t.reused_from is not None]
    assert [s.trial_number for s in submitted] == [t.number for t in trials]
    # Accuracy may come only from this study's own evaluation of the same variant.
    evaluated: set[str] = set()
    for spec in submitted:
        if spec.known_accuracy is not None:
            assert variant_key(spec.config) in evaluated
        evaluated.add(variant_key(spec.config))


@pytest.mark.slow
def test_changed_hardware_reuses_accuracy_and_measures_latency(
    storage: str, write_request: Any, submitted: list[TrialSpec]
) -> None:
    source = "digits-other-machine"
    _copy_study(storage, COLD, source, hardware_fingerprint="another-machine")
    warm = load_warm_start(source, storage)
    queue = expected_queue(warm, storage)
    retune(write_request, warm, len(queue) + 1)

    trials = finished_trials(storage)
    assert not [t for t in trials if t.reused_from is not None]
    specs = {s.trial_number: s for s in submitted}
    assert sorted(specs) == [t.number for t in trials]
    assert specs[0].known_accuracy is None  # the baseline evaluates its own accuracy
    accuracy = {variant_key(t.config): float(t.metrics["accuracy"]) for t in warm.trials}
    for trial in trials[1 : len(queue) + 1]:
        assert trial.marks.warm_start == source
        spec = specs[trial.number]
        assert spec.known_accuracy == accuracy[variant_key(spec.config)]
        assert trial.metrics is not None and trial.metrics["accuracy"] == spec.known_accuracy
        assert trial.provenance is not None
        assert trial.provenance.hardware_fingerprint == probe().fingerprint


@pytest.mark.slow
def test_resumed_retune_does_not_enqueue_the_front_again(
    storage: str, write_request: Any, submitted: list[TrialSpec]
) -> None:
    # Three configurations as the front, whatever the cold study measured on this machine (its
    # sampled trials may repeat a configuration or fail): a resume must find work left in it.
    loaded = load_warm_start(COLD, storage)
    baseline = stored_trials(storage, COLD)[0].config
    front = [{**baseline, "batch.size": size} for size in (2, 4, 8)]
    warm = WarmStart(COLD, front, loaded.trials)
    queue = expected_queue(warm, storage)
    assert queue == front
    retune(write_request, warm, 2)
    retune(write_request, warm, len(queue) + 2)

    retuned = stored_trials(storage, RETUNE)
    from_front = [t.config for t in retuned if t.marks.warm_start is not None]
    assert from_front == queue
    assert sum(t.marks.baseline for t in retuned) == 1
    assert all(t.ended for t in retuned)


def test_front_outside_the_current_space_is_not_enqueued() -> None:
    path = resolve_space_path("cpu.yaml")
    space = effective_space(load_space(path), probe(), str(path))
    baseline = space.baseline()
    other = {**baseline, "batch.size": 8}
    warm = WarmStart(
        COLD,
        front=[
            baseline,
            other,
            {**baseline, "batch.size": 3},  # not a choice
            {**baseline, "precision.mode": "fp8"},  # not on this hardware
            {**baseline, "runtime.compile_mode": "default"},  # inactive for this engine
            {k: v for k, v in baseline.items() if k != "batch.size"},  # a dimension missing
            {**baseline, "prune.method": "magnitude", "prune.ratio": 0.65},  # out of range
            other,
        ],
        trials=[],
    )
    assert warm.configs_for(space) == [other]


def test_unknown_warm_start_study_is_a_request_error(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(RequestError) as info:
        load_warm_start("no-such-study", storage)
    assert info.value.field == "storage"  # no storage there at all, and none is created
    assert not (tmp_path / "study.db").exists()
    optuna.create_study(study_name="another", storage=storage)
    with pytest.raises(RequestError) as info:
        load_warm_start("no-such-study", storage)
    assert info.value.field == "warm_start"


def _dominates(a: Candidate, b: Candidate, objectives: list[Metric]) -> bool:
    def oriented(c: Candidate) -> tuple[float, ...]:
        return tuple(
            -c.metrics[m.name] if m.direction is Direction.MAXIMIZE else c.metrics[m.name]
            for m in objectives
        )

    return dominates(oriented(a), oriented(b))


def _copy_study(storage: str, source: str, target: str, **provenance: Any) -> None:
    """A copy of a study whose trials' provenance says `provenance` instead."""
    original = optuna.load_study(study_name=source, storage=storage)
    copy = optuna.create_study(study_name=target, storage=storage, directions=original.directions)
    for key, value in original.user_attrs.items():
        copy.set_user_attr(key, value)
    for trial in original.trials:
        attrs = dict(trial.user_attrs)
        record = attrs.get("record")
        if record is not None and "provenance" in record:
            attrs["record"] = {**record, "provenance": {**record["provenance"], **provenance}}
        copy.add_trial(
            optuna.trial.create_trial(
                state=trial.state,
                values=trial.values,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs=attrs,
                system_attrs=trial.system_attrs,
            )
        )


def test_the_previous_choice_comes_first_also_where_it_is_off_the_front() -> None:
    """Where no finalist beat the baseline, the baseline was the choice: off the front, and
    still first in the warm start's order."""
    front = [
        Candidate(5, {"batch.size": 16}, {}, True),
        Candidate(2, {"batch.size": 4}, {}, True),
    ]
    assert selection_order(front, 5, {"batch.size": 16}) == [{"batch.size": 16}, {"batch.size": 4}]
    assert selection_order(front, None, None) == [{"batch.size": 4}, {"batch.size": 16}]
    baseline = {"batch.size": 1}
    assert selection_order(front, 0, baseline) == [baseline, {"batch.size": 4}, {"batch.size": 16}]


def test_a_measurement_taken_on_a_busy_machine_is_not_reused() -> None:
    config = {"batch.size": 8}
    expected = {"model_sha256": "abc"}
    busy = {"model_sha256": "abc", "contention": {"contended": True}}
    quiet = {"model_sha256": "abc", "contention": {"contended": False}}
    trials = [PreviousTrial(1, config, {}, busy), PreviousTrial(2, config, {}, quiet)]
    warm = WarmStart("old", [config], trials)
    found = warm.measurement(config, expected)
    assert found is not None and found.number == 2
    assert WarmStart("old", [config], trials[:1]).measurement(config, expected) is None
