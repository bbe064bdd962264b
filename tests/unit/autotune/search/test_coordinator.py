"""The coordinator's loop on an in-memory study and a scripted executor: the baseline first,
results held for it, an exact budget, retries of lost trials, answers without measuring, the
stop event and the tracker told once per trial."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from autotune.core.contract import TrialMetrics, TrialSpec, TrialStatus, TrialTimes
from autotune.core.errors import AutotuneError
from autotune.core.knobs import variant_key
from autotune.core.metrics import OBJECTIVES, Study, derived
from autotune.results import TrialEnding, TrialMarks
from autotune.results.leases import Owner
from autotune.search.budget import SearchBudget
from autotune.search.reaping import KILLED_REASON, MAX_ATTEMPTS
from autotune.strategies.autotune import ACCURACY_VIOLATION, UNSUPPORTED_LIKE
from tests.coordinator_support import (
    BASELINE,
    BASELINE_ACCURACY,
    INT8_ACCURACY_LOSS,
    PROFILE,
    ScriptedExecutor,
    config_with,
    dead_pid,
    failing,
    make_rig,
    measured,
    table_metrics,
)

EIGHT = config_with(batch__size=8)
INT8 = config_with(precision__mode="int8_static")


def is_trial(number: int, below_attempt: int = MAX_ATTEMPTS) -> Callable[[TrialSpec], bool]:
    """Picks trial `number`'s attempts before `below_attempt`."""

    def picks(spec: TrialSpec) -> bool:
        return spec.trial_number == number and spec.attempt < below_attempt

    return picks


# -- the baseline ------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["random", "autotune"])
def test_the_baseline_is_trial_zero_and_measured_first(strategy: str) -> None:
    rig = make_rig(strategy, executor=ScriptedExecutor(slots=2), trials=4)
    baseline = rig.search()
    first = rig.executor.submitted[0]
    assert (first.trial_number, first.config) == (0, BASELINE)
    assert baseline.number == 0 and baseline.marks.baseline and baseline.measured
    assert baseline.metrics is not None and baseline.metrics["accuracy_drop"] == 0.0
    assert rig.records()[0].marks.baseline


def test_a_result_measured_on_another_kind_of_node_is_refused() -> None:
    """Timings of unlike nodes never meet in one study: a result whose provenance names
    another fingerprint than the study's kind is an error with the reason, not a point."""
    elsewhere = ScriptedExecutor(
        measured_on=lambda spec: "0ther" if spec.trial_number == 2 else PROFILE.fingerprint
    )
    rig = make_rig(executor=elsewhere, trials=4)
    rig.search()
    records = {r.number: r for r in rig.records()}
    refused = records[2]
    assert (refused.state, refused.status) == ("pruned", "error")
    assert "0ther" in (refused.reason or "") and PROFILE.fingerprint in (refused.reason or "")
    assert refused.metrics is None
    assert all(records[n].state == "complete" for n in (0, 1, 3))


def test_a_baseline_that_timed_out_is_measured_again_on_resume() -> None:
    timing_out = ScriptedExecutor(failing("timeout", is_trial(0)))
    first = make_rig("autotune", executor=timing_out, trials=3)
    with pytest.raises(AutotuneError, match="baseline"):
        first.search()
    resumed = make_rig("autotune", store=first.store, trials=3)
    baseline = resumed.search()
    assert resumed.executor.submitted[0].config == BASELINE
    assert baseline.measured and baseline.metrics is not None


def test_a_failed_baseline_raises() -> None:
    rig = make_rig(executor=ScriptedExecutor(failing("error", is_trial(0))))
    with pytest.raises(AutotuneError, match=r"baseline .* failed: scripted error"):
        rig.search()
    [record] = rig.records()
    assert (record.state, record.status) == ("pruned", "error")
    assert rig.tracker.numbers == [0]


def test_a_baseline_lost_on_every_attempt_raises() -> None:
    rig = make_rig(executor=ScriptedExecutor(failing("lost", is_trial(0))))
    with pytest.raises(AutotuneError, match="baseline"):
        rig.search()
    assert rig.executor.attempts_of(0) == list(range(MAX_ATTEMPTS))
    assert [r.state for r in rig.records()] == ["failed"]


def test_results_before_the_baseline_wait_for_its_accuracy() -> None:
    def reply(spec: TrialSpec) -> TrialMetrics:
        metrics = measured(spec)
        accuracy = BASELINE_ACCURACY if spec.trial_number == 0 else 0.9
        return metrics.model_copy(update={"accuracy": accuracy})

    executor = ScriptedExecutor(reply, slots=3, newest_first=True)
    rig = make_rig(executor=executor, trials=3)
    rig.search()
    assert rig.tracker.numbers == [0, 2, 1]  # held until trial 0 is told, then in arrival order
    for record in rig.records()[1:]:
        assert record.metrics is not None
        assert record.metrics["accuracy_drop"] == pytest.approx(BASELINE_ACCURACY - 0.9)


def test_a_known_variant_is_not_evaluated_again() -> None:
    rig = make_rig(trials=3)
    rig.queue(EIGHT, INT8)
    rig.search()
    known = {tuple(s.config.items()): s.known_accuracy for s in rig.executor.submitted}
    assert known[tuple(BASELINE.items())] is None
    assert known[tuple(EIGHT.items())] == BASELINE_ACCURACY
    assert known[tuple(INT8.items())] is None


def test_a_known_variant_is_told_its_other_quality_figures_too() -> None:
    """Top-1 agreement and how accuracy was judged are the variant's, like its accuracy: a
    later trial of the variant that skips evaluation reports them as the first measured."""

    def reply(spec: TrialSpec) -> TrialMetrics:
        metrics = measured(spec)
        if spec.known_accuracy is not None:  # as a worker does: the told figures, not new ones
            return metrics.model_copy(
                update={"accuracy": spec.known_accuracy, **spec.known_quality}
            )
        figures = {"top1_agreement": 0.974, "accuracy_judged_by": "fidelity: cosine"}
        return metrics.model_copy(update=figures)

    rig = make_rig(executor=ScriptedExecutor(reply), trials=2)
    rig.queue(EIGHT)
    rig.search()
    [later] = [s for s in rig.executor.submitted if s.config == EIGHT]
    assert later.known_quality == {
        "top1_agreement": 0.974,
        "accuracy_judged_by": "fidelity: cosine",
    }
    for record in rig.records():
        assert record.metrics is not None and record.metrics["top1_agreement"] == 0.974


# -- the budget --------------------------------------------------------------------------


@pytest.mark.parametrize("slots", [1, 3])
def test_the_budget_is_exact(slots: int) -> None:
    rig = make_rig(executor=ScriptedExecutor(slots=slots, newest_first=True), trials=7)
    rig.search()
    records = rig.records()
    assert len(records) == 7 == len(rig.executor.submitted)
    assert {r.state for r in records} == {"complete"}
    assert rig.store.counted() == rig.store.used() == 7


def test_the_timeout_stops_asking() -> None:
    rig = make_rig(trials=None, timeout_s=3600.0)

    def time_runs_out(spec: TrialSpec) -> None:
        if spec.trial_number == 2:
            rig.coordinator.budget.started -= 7200.0

    rig.executor.on_submit = time_runs_out
    rig.search()
    assert [r.number for r in rig.records()] == [0, 1, 2]
    assert {r.state for r in rig.records()} == {"complete"}


def test_a_resumed_study_counts_the_trials_it_holds() -> None:
    first = make_rig(trials=3)
    first.search()
    resumed = make_rig(store=first.store, trials=5)
    resumed.search()
    assert [s.trial_number for s in resumed.executor.submitted] == [3, 4]
    assert resumed.store.counted() == 5
    assert resumed.notes == [f"study {first.store.name}: 3 of 5 trials done, re-using them"]


# -- lost trials -------------------------------------------------------------------------


def test_a_lost_trial_runs_again_with_the_next_attempt() -> None:
    rig = make_rig(executor=ScriptedExecutor(failing("lost", is_trial(1, below_attempt=1))))
    rig.search()
    assert rig.executor.attempts_of(1) == [0, 1]
    record = rig.records()[1]
    assert (record.state, record.attempt) == ("complete", 1)
    assert [(t.number, t.attempt) for t in rig.tracker.trials][:2] == [(0, 0), (1, 1)]


def test_a_trial_lost_on_every_attempt_fails_and_does_not_count() -> None:
    rig = make_rig(executor=ScriptedExecutor(failing("lost", is_trial(1))), trials=3)
    rig.search()
    assert rig.executor.attempts_of(1) == list(range(MAX_ATTEMPTS))
    records = rig.records()
    assert (records[1].state, records[1].status) == ("failed", "lost")
    assert records[1].attempt == MAX_ATTEMPTS - 1
    assert len(records) == 4 and rig.store.counted() == 3


def test_a_trial_that_died_with_an_in_process_coordinator_is_oom_and_not_run_again() -> None:
    first = make_rig(trials=4)
    first.search()
    killed = Owner(pid=dead_pid(), in_process=True)  # the tuning the trial took down
    first.store.beat(killed)
    running = first.store.create(first.coordinator.tuning.space, EIGHT, TrialMarks(), killed)
    resumed = make_rig(store=first.store, trials=6)
    resumed.search()
    record = resumed.records()[running.number]
    assert (record.state, record.status, record.reason) == ("pruned", "oom", KILLED_REASON)
    assert running.number not in {s.trial_number for s in resumed.executor.submitted}
    assert all(r.marks.retry_of != running.number for r in resumed.records())


# -- answers without measuring -----------------------------------------------------------


@pytest.mark.parametrize("status", ["oom", "too_slow"])
def test_an_oom_or_too_slow_batch_skips_larger_batches_of_its_configuration(
    status: TrialStatus,
) -> None:
    """Batch 8 ran out of memory, or a call of it was far too slow: batch 64 of the same
    configuration is not run; another precision at batch 64 is."""
    sixty_four = config_with(batch__size=64)
    int8_at_64 = config_with(batch__size=64, precision__mode="int8_static")
    fails_at_eight = failing(status, lambda spec: spec.config == EIGHT)
    rig = make_rig(executor=ScriptedExecutor(fails_at_eight), trials=3)  # the skip is free
    rig.queue(EIGHT, sixty_four, int8_at_64)
    rig.search()
    assert rig.executor.measured_configs() == [BASELINE, EIGHT, int8_at_64]
    failed, skipped = rig.records()[1:3]
    assert (failed.state, failed.status) == ("pruned", status)
    assert (skipped.config, skipped.state, skipped.status, skipped.measured) == (
        sixty_four,
        "pruned",
        "skipped",
        False,
    )
    assert skipped.reason is not None and "batch.size 8" in skipped.reason
    assert rig.store.counted() == 4


def test_a_batch_that_would_outgrow_the_trials_memory_is_not_run() -> None:
    """10 MB a sample measured between batch 1 and 8: batch 64 needs at least 640 MB, past
    the 500 MB a trial may take; a variant without two measured batches is run."""

    def growing(spec: TrialSpec) -> TrialMetrics:
        batch = int(spec.config.get("batch.size", 1))
        return table_metrics(spec.config).model_copy(update={"peak_memory_mb": 100.0 + 10 * batch})

    sixty_four = config_with(batch__size=64)
    int8_at_64 = config_with(batch__size=64, precision__mode="int8_static")
    executor = ScriptedExecutor(growing)
    executor.trial_memory_mb = 500
    rig = make_rig(executor=executor, trials=3)
    rig.queue(EIGHT, sixty_four, int8_at_64)
    rig.search()
    assert rig.executor.measured_configs() == [BASELINE, EIGHT, int8_at_64]
    skipped = rig.records()[2]
    assert (skipped.config, skipped.status, skipped.measured) == (sixty_four, "skipped", False)
    assert skipped.reason is not None and "at least 640 MB" in skipped.reason
    assert "500 MB" in skipped.reason


def test_a_batch_whose_call_would_take_too_long_is_not_run() -> None:
    """Calls of 0.05 ms at batch 1 and 0.264 ms at batch 8 (0.0306 ms a sample between them):
    batch 64 would take about 1.98 ms, past a 1 ms bound; int8 at batch 64, with no calls
    measured to extrapolate from, runs."""
    sixty_four = config_with(batch__size=64)
    int8_at_64 = config_with(batch__size=64, precision__mode="int8_static")
    rig = make_rig(executor=ScriptedExecutor(), trials=3)
    rig.coordinator.state.calls.max_call_ms = 1.0
    rig.queue(EIGHT, sixty_four, int8_at_64)
    rig.search()
    assert rig.executor.measured_configs() == [BASELINE, EIGHT, int8_at_64]
    skipped = rig.records()[2]
    assert (skipped.config, skipped.status, skipped.measured) == (sixty_four, "skipped", False)
    assert skipped.reason is not None
    assert "about 2 ms" in skipped.reason and "max_call_ms = 1 ms" in skipped.reason


def test_a_batch_within_the_call_bound_is_run() -> None:
    rig = make_rig(executor=ScriptedExecutor(), trials=3)
    rig.coordinator.state.calls.max_call_ms = 2.5  # batch 64: about 1.98 ms
    rig.queue(EIGHT, config_with(batch__size=64))
    rig.search()
    assert len(rig.executor.measured_configs()) == 3


def test_the_baseline_reads_its_call_time_at_each_batch_size_from_its_own_up() -> None:
    rig = make_rig(executor=ScriptedExecutor(scans=True), trials=2)
    rig.queue(EIGHT)
    rig.search()
    baseline, eight = rig.executor.submitted
    assert (baseline.batch_scan, eight.batch_scan) == ([1, 8, 64], [])
    stored = rig.records()[0].call_ms_by_batch
    assert stored == {
        b: table_metrics(config_with(batch__size=b)).latency_p50_ms for b in (1, 8, 64)
    }
    assert rig.records()[1].call_ms_by_batch == {}


def test_another_variant_never_measured_is_not_bounded_by_the_baseline_call_times() -> None:
    """The baseline's call at batch 64 takes 1.39 ms, past a 1 ms bound; int8 at 64, another
    model variant never measured, still runs: the baseline's figure says nothing of its
    speed. The baseline's own configuration at 64 is not run."""
    int8_at_64 = config_with(batch__size=64, precision__mode="int8_static")
    rig = make_rig(executor=ScriptedExecutor(scans=True), trials=3)
    rig.coordinator.state.calls.max_call_ms = 1.0
    rig.queue(int8_at_64, config_with(batch__size=64))
    rig.search()
    assert rig.executor.measured_configs()[:2] == [BASELINE, int8_at_64]
    skipped = rig.records()[2]
    assert (skipped.config, skipped.status) == (config_with(batch__size=64), "skipped")
    assert skipped.reason is not None and "past measurement.max_call_ms" in skipped.reason


def test_a_configuration_measured_at_one_batch_grows_as_the_baseline_does() -> None:
    """int8 calls take three times the baseline's: 0.79 ms at batch 8, so batch 64 would take
    about 3 x 1.39 = 4.2 ms, past a 2.5 ms bound; fp32 at 64 (1.39 ms) is run."""

    def slow_int8(spec: TrialSpec) -> TrialMetrics:
        metrics = table_metrics(spec.config)
        factor = 3.0 if spec.config["precision.mode"] == "int8_static" else 1.0
        return metrics.model_copy(update={"latency_p50_ms": metrics.latency_p50_ms * factor})

    int8_at_8 = config_with(batch__size=8, precision__mode="int8_static")
    int8_at_64 = config_with(batch__size=64, precision__mode="int8_static")
    sixty_four = config_with(batch__size=64)
    rig = make_rig(executor=ScriptedExecutor(slow_int8, scans=True), trials=3)
    rig.coordinator.state.calls.max_call_ms = 2.5
    rig.queue(int8_at_8, int8_at_64, sixty_four)
    rig.search()
    assert rig.executor.measured_configs() == [BASELINE, int8_at_8, sixty_four]
    skipped = rig.records()[2]
    assert skipped.status == "skipped" and skipped.reason is not None
    assert "about 4 ms" in skipped.reason
    assert "call at batch.size 8, grown as the baseline's grows" in skipped.reason


def test_a_per_sample_request_designs_where_the_baseline_time_per_sample_levels_off() -> None:
    """Per sample 0.1, 0.025 and 0.0245 ms at batch 1, 8 and 64: batch 8 is within 5% of the
    best, so the designed set runs there; with two slots nothing starts before the baseline's
    call times are known (the designed set would run at 64 without them)."""
    per_call_ms = {1: 0.1, 8: 0.2, 64: 1.57}

    def levelling(spec: TrialSpec) -> TrialMetrics:
        batch = int(spec.config["batch.size"])
        return table_metrics(spec.config).model_copy(
            update={
                "latency_p50_ms": per_call_ms[batch],
                "throughput_per_s": 1e3 * batch / per_call_ms[batch],
            }
        )

    executor = ScriptedExecutor(levelling, slots=2, scans=True)
    rig = make_rig("autotune", executor=executor, trials=4, objectives=["accuracy", "throughput"])
    rig.search()
    designed = [r for r in rig.records() if r.marks.proposed == "designed"]
    assert len(designed) == 3
    assert {r.config["batch.size"] for r in designed} == {8}


def test_a_trial_is_screened_against_the_feasible_front_so_far() -> None:
    """Batch 8 (faster a sample, as accurate) makes the front; int8 at batch 8 is less
    accurate and half as fast, so the front dominates it even 20% faster: screened, its
    figures kept, never on the front; a repeat of it is answered as screened unmeasured."""
    int8_at_8 = config_with(batch__size=8, precision__mode="int8_static")
    rig = make_rig(
        "autotune",
        executor=ScriptedExecutor(half_as_fast_in_int8),
        trials=4,
        objectives=["accuracy", "throughput"],
    )
    rig.queue(EIGHT, int8_at_8, int8_at_8)
    rig.search()
    baseline_spec, eight_spec, int8_spec = rig.executor.submitted
    assert baseline_spec.screen is None
    assert eight_spec.screen is not None and int8_spec.screen is not None
    assert [(o.metric, o.maximize, o.timed) for o in int8_spec.screen.objectives] == [
        ("accuracy", True, False),
        ("throughput_per_s", True, True),
    ]
    eight_metrics = table_metrics(EIGHT)
    assert [eight_metrics.accuracy, eight_metrics.throughput_per_s] in int8_spec.screen.front
    screened, repeat = rig.records()[2:4]
    assert (screened.state, screened.status, screened.measured) == ("pruned", "screened", True)
    assert screened.metrics is not None and not screened.has_metrics
    assert screened.metrics["throughput_per_s"] == table_metrics(int8_at_8).throughput_per_s / 2
    assert (repeat.status, repeat.measured) == ("screened", False)
    assert int8_at_8 not in rig.coordinator._front()
    assert "feasible" not in rig.tracker.trials[2].tags


def half_as_fast_in_int8(spec: TrialSpec) -> TrialMetrics:
    metrics = table_metrics(spec.config)
    if spec.config["precision.mode"] != "int8_static":
        return metrics
    return metrics.model_copy(update={"throughput_per_s": metrics.throughput_per_s / 2})


def test_a_trial_within_the_margin_of_the_front_is_measured_in_full() -> None:
    """int8 at batch 8 is as fast as batch 8 and less accurate: 20% faster it would be on the
    front, so it is timed in full."""
    int8_at_8 = config_with(batch__size=8, precision__mode="int8_static")
    rig = make_rig("autotune", trials=3, objectives=["accuracy", "throughput"])
    rig.queue(EIGHT, int8_at_8)
    rig.search()
    assert rig.executor.submitted[2].screen is not None
    assert rig.records()[2].status == "ok"


def test_without_a_screen_window_no_trial_is_screened() -> None:
    int8_at_8 = config_with(batch__size=8, precision__mode="int8_static")
    executor = ScriptedExecutor(half_as_fast_in_int8)
    rig = make_rig("autotune", executor=executor, trials=3, objectives=["accuracy", "throughput"])
    tuning = rig.coordinator.tuning
    unscreened = tuning.request.measurement.model_copy(update={"screen_seconds": None})
    request = tuning.request.model_copy(update={"measurement": unscreened})
    rig.coordinator.tuning = dataclasses.replace(tuning, request=request)
    rig.queue(EIGHT, int8_at_8)
    rig.search()
    assert all(spec.screen is None for spec in rig.executor.submitted)
    assert rig.records()[2].status == "ok"


def test_the_time_budget_keeps_what_the_head_to_head_and_export_need() -> None:
    """Builds of 2 s: the choice, two neighbours and the baseline built and timed in ten
    rounds of 0.3 s, and the choice built again for the export, 5 x 2 + 4 x 3 = 22 s; a
    budget of 20 s starts no trial after the baseline."""
    executor = ScriptedExecutor(times=TrialTimes(build_s=2.0, timing_s=1.0))
    rig = make_rig(executor=executor, trials=None, timeout_s=20.0)
    rig.search()
    assert rig.coordinator.budget.reserve_s == pytest.approx(22.0)
    assert len(rig.executor.submitted) == 1
    (baseline,) = rig.tracker.trials
    assert baseline.metrics is not None
    assert (baseline.metrics["time.build_s"], baseline.metrics["time.timing_s"]) == (2.0, 1.0)


def test_a_budget_allows_trials_while_more_than_its_reserve_is_left() -> None:
    budget = SearchBudget(trials=None, timeout_s=60.0)
    assert budget.allows(0)
    budget.reserve_s = 59.0
    assert budget.allows(0)
    budget.reserve_s = 61.0
    assert not budget.allows(0)


def test_without_a_memory_cap_no_batch_is_predicted_out() -> None:
    def growing(spec: TrialSpec) -> TrialMetrics:
        batch = int(spec.config.get("batch.size", 1))
        return table_metrics(spec.config).model_copy(update={"peak_memory_mb": 100.0 + 10 * batch})

    rig = make_rig(executor=ScriptedExecutor(growing), trials=3)
    rig.queue(EIGHT, config_with(batch__size=64))
    rig.search()
    assert len(rig.executor.measured_configs()) == 3


def test_a_repeat_of_a_finished_trial_is_answered_from_it() -> None:
    rig = make_rig("autotune", trials=3)
    rig.queue(EIGHT, EIGHT)
    rig.search()
    assert rig.executor.measured_configs() == [BASELINE, EIGHT]
    original, repeat = rig.records()[1:]
    assert repeat.reused_from == f"{rig.store.name}#{original.number}"
    assert (repeat.measured, original.measured) == (False, True)
    assert (repeat.state, repeat.metrics, repeat.values) == (
        "complete",
        original.metrics,
        original.values,
    )


def test_a_repeat_of_a_running_trial_waits_for_its_measurement() -> None:
    rig = make_rig("autotune", executor=ScriptedExecutor(slots=2), trials=3)
    rig.queue(EIGHT, EIGHT)
    rig.search()
    assert rig.executor.measured_configs() == [BASELINE, EIGHT]
    assert rig.tracker.numbers == [0, 1, 2]
    repeat = rig.records()[2]
    assert repeat.reused_from == f"{rig.store.name}#1"
    assert repeat.state == "complete" and not repeat.measured


def test_a_variant_that_violates_the_accuracy_bound_is_not_measured_again() -> None:
    int8_at_eight = config_with(batch__size=8, precision__mode="int8_static")
    rig = make_rig("autotune", trials=3, constraints={"max_accuracy_drop": 0.01})
    rig.queue(INT8, int8_at_eight)
    rig.search()
    assert rig.executor.measured_configs()[:2] == [BASELINE, INT8]
    assert int8_at_eight not in rig.executor.measured_configs()
    violating, skipped = rig.records()[1:3]
    assert violating.violations["max_accuracy_drop"] == pytest.approx(INT8_ACCURACY_LOSS - 0.01)
    assert not violating.feasible
    assert (skipped.state, skipped.status, skipped.reason) == (
        "pruned",
        "skipped",
        ACCURACY_VIOLATION,
    )
    assert not skipped.measured


def test_a_variant_a_subset_showed_infeasible_is_not_measured_again() -> None:
    """Trials after the baseline carry its accuracy less the bound; int8 ends infeasible on
    its subset, and int8 at batch 8 is then skipped unmeasured, with the accuracy reason."""
    int8_at_eight = config_with(batch__size=8, precision__mode="int8_static")
    executor = ScriptedExecutor(failing("infeasible", lambda spec: spec.config == INT8))
    rig = make_rig("autotune", executor=executor, trials=3, constraints={"max_accuracy_drop": 0.01})
    rig.queue(INT8, int8_at_eight)
    rig.search()
    assert rig.executor.measured_configs()[:2] == [BASELINE, INT8]
    assert int8_at_eight not in rig.executor.measured_configs()
    baseline_spec, int8_spec = rig.executor.submitted[:2]
    assert baseline_spec.accuracy_floor is None
    assert int8_spec.accuracy_floor == pytest.approx(BASELINE_ACCURACY - 0.01)
    infeasible, skipped = rig.records()[1:3]
    assert (infeasible.state, infeasible.status, infeasible.metrics) == (
        "pruned",
        "infeasible",
        None,
    )
    assert (skipped.status, skipped.reason, skipped.measured) == (
        "skipped",
        ACCURACY_VIOLATION,
        False,
    )
    resumed = make_rig(
        "autotune", store=rig.store, trials=3, constraints={"max_accuracy_drop": 0.01}
    )
    resumed.coordinator.state.load(rig.records())
    assert variant_key(INT8) in resumed.coordinator.state.excluded(0.01)


def test_a_configuration_that_cannot_be_built_is_not_tried_at_another_batch_size() -> None:
    unsupported = ScriptedExecutor(failing("unsupported", is_trial(1)))
    rig = make_rig("autotune", executor=unsupported, trials=3)
    rig.queue(INT8, config_with(batch__size=8, precision__mode="int8_static"))
    rig.search()
    assert rig.executor.measured_configs()[:2] == [BASELINE, INT8]
    assert rig.records()[1].status == "unsupported"
    skipped = rig.records()[2]
    assert skipped.status == "skipped" and skipped.reason is not None
    assert skipped.reason.startswith(f"{UNSUPPORTED_LIKE} #1")


# -- stopping and telling ----------------------------------------------------------------


def test_the_stop_event_stops_asking_and_lets_running_trials_finish() -> None:
    rig = make_rig(executor=ScriptedExecutor(slots=3), trials=20)

    def stop_after_trial_three(spec: TrialSpec) -> None:
        if spec.trial_number == 3:
            rig.coordinator.stop.set()

    rig.executor.on_submit = stop_after_trial_three
    rig.search()
    records = rig.records()
    assert [r.number for r in records] == [0, 1, 2, 3]
    assert {r.state for r in records} == {"complete"}
    assert rig.tracker.numbers == [0, 1, 2, 3]


def test_every_trial_is_told_to_the_tracker_once() -> None:
    def reply(spec: TrialSpec) -> TrialStatus | TrialMetrics:
        if spec.trial_number % 3 == 1 and spec.attempt == 0:
            return "lost"
        if spec.config.get("batch.size") == 64:
            return "oom"
        return table_metrics(spec.config)

    executor = ScriptedExecutor(reply, slots=3, newest_first=True)
    rig = make_rig(
        "autotune", executor=executor, trials=12, constraints={"max_accuracy_drop": 0.01}
    )
    rig.search()
    records = rig.records()
    assert sorted(rig.tracker.numbers) == [r.number for r in records]
    attempts = {t.number: t.attempt for t in rig.tracker.trials}
    assert attempts == {r.number: r.attempt for r in records}
    assert all(r.ended for r in records)


def test_results_held_for_another_coordinators_baseline_are_told_once_it_is() -> None:
    """Another (live) coordinator measures the baseline: this one's results wait for it, and
    are told, with their accuracy drop, when it lands in the study."""
    rig = make_rig("random", trials=4)
    store, space = rig.store, rig.coordinator.tuning.space
    alive = Owner()
    store.beat(alive)  # its heartbeat is fresh: its trial is not reaped
    other = store.create(space, BASELINE, TrialMarks(baseline=True), alive)
    baseline_metrics = derived(table_metrics(BASELINE).model_dump(), Study(BASELINE_ACCURACY))

    def baseline_lands(spec: TrialSpec) -> None:
        if other.state == "running" and store.records(("running",))[0].number == other.number:
            outcome = TrialEnding(
                config=BASELINE,
                attempt=0,
                status="ok",
                variant_key=variant_key(BASELINE),
                metrics=baseline_metrics,
                violations={},
                measured=True,
            )
            objectives = rig.coordinator.tuning.request.objectives
            store.tell(
                other.number, outcome, [baseline_metrics[OBJECTIVES[o].name] for o in objectives]
            )

    rig.executor.on_submit = baseline_lands
    baseline = rig.search()
    records = rig.records()
    assert baseline.number == other.number
    assert [r.state for r in records] == ["complete"] * 4, [r.state for r in records]
    ours = [r for r in records if not r.marks.baseline]
    assert all(r.metrics is not None and "accuracy_drop" in r.metrics for r in ours)
    assert rig.tracker.numbers == [r.number for r in ours]
