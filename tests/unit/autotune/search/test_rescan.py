"""A baseline whose batch scan ran under other processes' load scans again once the machine
is quiet, before its call times steer the study (autotune.search.rescan)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from autotune.core.contract import Contention, TrialMetrics, TrialSpec
from autotune.strategies import make_strategy
from tests.coordinator_support import (
    BASELINE_ACCURACY,
    Rig,
    ScriptedExecutor,
    make_request,
    make_rig,
    open_store,
    small_space,
    table_metrics,
)

# The baseline's call times by batch size on a quiet machine: per sample 0.1, 0.025 and
# 0.0245 ms, so a per-sample request designs at batch 8 (within 5% of the best).
QUIET_MS = {1: 0.1, 8: 0.2, 64: 1.57}
# Read under load, the small batches suffer most: per sample 0.3, 0.1125 and 0.025 ms, and
# the designed set would run at 64.
LOADED_MS = {1: 0.3, 8: 0.9, 64: 1.6}
PER_SAMPLE = ["accuracy", "throughput"]
# The rows of a study's log that tell of a scan read again.
SCANNED_AGAIN = "scanned again"


class BusyMachine:
    """The machine as each run of the baseline (a spec with a batch scan) finds it, in turn:
    other processes' share of the cores and the call times it reads by batch size. Every
    other trial measures on a quiet machine at `QUIET_MS`."""

    def __init__(self, *runs: tuple[float, dict[int, float]]) -> None:
        self.runs: Iterator[tuple[float, dict[int, float]]] = iter(runs)
        self.call_ms = QUIET_MS

    def contention(self, spec: TrialSpec) -> Contention:
        share, self.call_ms = next(self.runs) if spec.batch_scan else (0.0, QUIET_MS)
        return Contention(
            seconds=1.0,
            cores=1,
            other_cpu_share=share,
            machine_other_cpu_share=share,
            steal_share=0.0,
            cores_to_itself=1.0 - share,
            waited_s=10.0 if share > 0.1 else 0.0,
            contended=share > 0.1,
        )

    def reply(self, spec: TrialSpec) -> TrialMetrics:
        batch = int(spec.config["batch.size"])
        call_ms = self.call_ms[batch]
        return table_metrics(spec.config).model_copy(
            update={"latency_p50_ms": call_ms, "throughput_per_s": 1e3 * batch / call_ms}
        )


def searched(machine: BusyMachine, trials: int = 4, storage: str | None = None) -> Rig:
    """A search of autotune's strategy leaning per sample, its study in memory or `storage`."""
    executor = ScriptedExecutor(machine.reply, scans=True, contention=machine.contention)
    request = make_request(trials, objectives=PER_SAMPLE)
    space = small_space()
    store = open_store(request, make_strategy("autotune", space, request, 0), space, storage)
    rig = make_rig("autotune", executor=executor, trials=trials, objectives=PER_SAMPLE, store=store)
    rig.search()
    return rig


def test_a_contended_baseline_scan_is_read_again_and_the_quiet_one_places_the_designed_set() -> (
    None
):
    rig = searched(BusyMachine((0.78, LOADED_MS), (0.0, QUIET_MS)), trials=4)
    records = rig.records()
    designed = [r for r in records if r.marks.proposed == "designed"]
    assert len(designed) == 3
    assert {r.config["batch.size"] for r in designed} == {8}
    baseline = records[0]
    assert baseline.marks.baseline and baseline.call_ms_by_batch == QUIET_MS
    note = (
        "the baseline's batch scan ran under load (other processes 78% of the cores): scanned "
        "again once quiet: batch 1 0.3 ms → 0.1 ms, batch 8 0.9 ms → 0.2 ms, "
        "batch 64 1.6 ms → 1.57 ms"
    )
    assert [n for n in rig.notes if SCANNED_AGAIN in n] == [note]
    assert baseline.rescanned == note
    # one baseline trial, measured once in full and scanned once more: the budget's 4 trials
    assert [r.number for r in records] == [0, 1, 2, 3]
    assert [r.marks.baseline for r in records].count(True) == 1
    assert [s.trial_number for s in rig.executor.submitted] == [0, 0, 1, 2, 3]
    assert rig.coordinator.state.calls.baseline_ms == QUIET_MS
    logged = next(t for t in rig.tracker.trials if t.number == 0)
    assert logged.tags["rescanned"] == note  # the baseline's MLflow run says so too


def test_the_scan_again_waits_for_quiet_and_evaluates_nothing() -> None:
    """Even where the study stopped waiting for quiet (its trials measure at once), the scan
    read again waits first; the baseline's accuracy is known, so it is not evaluated again."""
    machine = BusyMachine((0.78, LOADED_MS), (0.0, QUIET_MS))
    executor = ScriptedExecutor(machine.reply, scans=True, contention=machine.contention)
    rig = make_rig("autotune", executor=executor, trials=1, objectives=PER_SAMPLE)
    rig.coordinator.quiet.given_up = True
    rig.search()
    first, again = rig.executor.submitted
    assert (first.measurement.contention, again.measurement.contention) == ("warn", "wait")
    assert (first.known_accuracy, again.known_accuracy) == (None, BASELINE_ACCURACY)
    assert again.batch_scan == first.batch_scan == [1, 8, 64]
    assert again.config == first.config


def test_a_scan_contended_again_keeps_the_lower_reading_of_each_batch() -> None:
    still_loaded = {1: 0.5, 8: 0.25, 64: 1.58}
    rig = searched(BusyMachine((0.78, LOADED_MS), (0.4, still_loaded)), trials=2)
    baseline = rig.records()[0]
    assert baseline.call_ms_by_batch == {1: 0.3, 8: 0.25, 64: 1.58}
    note = (
        "the baseline's batch scan ran under load (other processes 78% of the cores): scanned "
        "again, under load again (other processes 40% of the cores): the lower reading of each "
        "batch kept: batch 1 0.3 ms → 0.3 ms, batch 8 0.9 ms → 0.25 ms, "
        "batch 64 1.6 ms → 1.58 ms"
    )
    assert [n for n in rig.notes if SCANNED_AGAIN in n] == [note]
    baseline_runs = [s for s in rig.executor.submitted if s.batch_scan]
    assert len(baseline_runs) == 2  # never a third


def test_a_quiet_baseline_is_not_scanned_again() -> None:
    rig = searched(BusyMachine((0.0, QUIET_MS)), trials=2)
    baseline = rig.records()[0]
    assert baseline.call_ms_by_batch == QUIET_MS
    assert baseline.rescanned is None
    assert [s.trial_number for s in rig.executor.submitted] == [0, 1]
    assert not [n for n in rig.notes if SCANNED_AGAIN in n]


def test_the_baseline_record_holds_the_scan_read_again_in_a_database(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    searched(
        BusyMachine((0.78, LOADED_MS), (0.0, QUIET_MS)), trials=2, storage=storage
    ).store.close()
    request = make_request(2, objectives=PER_SAMPLE)
    space = small_space()
    store = open_store(request, make_strategy("autotune", space, request, 0), space, storage)
    try:
        baselines = [r for r in store.records() if r.marks.baseline]
    finally:
        store.close()
    assert len(baselines) == 1
    assert baselines[0].call_ms_by_batch == QUIET_MS
    assert baselines[0].rescanned is not None and "once quiet" in baselines[0].rescanned
