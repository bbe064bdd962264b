"""The trial budget counts measurements: skipped trials (never run) do not use it up, and
skipped trials in a row end a search that would otherwise never end."""

from __future__ import annotations

from autotune.core.contract import TrialResult, TrialSpec
from autotune.search.budget import SearchBudget
from autotune.strategies import Answer
from tests.coordinator_support import Rig, make_rig


def skipping(rig: Rig, skips: set[int] | None = None) -> None:
    """The rig's strategy answers trials `skips` (every trial but the baseline when None)
    as skipped."""

    def answer(study: str, spec: TrialSpec, excluded: set[str]) -> Answer | None:
        if skips is None or spec.trial_number in skips:
            return Answer(TrialResult.for_spec(spec, "skipped", "test: ruled out"))
        return None

    rig.coordinator.strategy.answer = answer  # type: ignore[method-assign]


def test_a_study_of_n_trials_measures_n_even_when_some_are_skipped() -> None:
    rig = make_rig("random", trials=6)
    skipping(rig, skips={1, 2, 4, 5, 7})
    rig.search()
    progress = [trial.done for trial in rig.observed.trials]
    records = rig.records()
    assert [r.number for r in records if r.status == "skipped"] == [1, 2, 4, 5, 7]
    assert len(rig.executor.submitted) == 6
    assert sum(r.counted and r.status != "skipped" for r in records) == 6
    assert max(progress) == progress[-1] == 6
    assert not any("skipped" in note for note in rig.notes)


def test_skips_in_a_row_end_a_study_of_only_skipped_proposals() -> None:
    rig = make_rig("random", trials=5)
    rig.coordinator.budget.max_skips_in_a_row = 7
    skipping(rig)
    rig.search()
    records = rig.records()
    assert [r.status for r in records] == ["ok"] + ["skipped"] * 7
    assert len(rig.executor.submitted) == 1
    (note,) = [n for n in rig.notes if "skipped" in n]
    assert "last 7 trials were all skipped" in note


def test_a_resumed_study_knows_its_skipped_trials() -> None:
    first = make_rig("random", trials=3)
    skipping(first, skips={1, 3})
    first.search()
    resumed = make_rig("random", trials=5, store=first.store)
    skipping(resumed, skips=set())
    resumed.search()
    records = resumed.records()
    assert sum(r.counted and r.status != "skipped" for r in records) == 5
    assert len(resumed.executor.submitted) == 2
    assert any("3 of 5 trials done" in note for note in resumed.notes)


def test_a_measured_trial_breaks_a_run_of_skips_and_a_lost_one_does_not() -> None:
    budget = SearchBudget(trials=2, timeout_s=None, max_skips_in_a_row=3)
    assert budget.told("skipped") is None
    assert budget.told("lost") is None
    assert budget.told("skipped") is None
    assert budget.told("screened") is None
    assert budget.skips_in_a_row == 0 and budget.skipped == 2
    assert budget.allows(3)  # 3 used, 2 of them skipped: one counts
    assert not budget.allows(4)
    for _ in range(2):
        assert budget.told("skipped") is None
    assert budget.told("skipped") is not None
    assert budget.skipped_out and not budget.allows(0)
