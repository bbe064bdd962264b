"""autotune's search strategy on recorded tables: repeats are not measured again, known
infeasible variants are not measured, the designed set comes first, slots finish out of order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from autotune.core.contract import TrialResult, TrialSpec
from autotune.core.knobs import variant_key
from autotune.execution.replay_table import ReplayTable
from autotune.requests.request import TuningRequest, load_request
from autotune.results import TrialRecord
from autotune.results.optuna_store import record_of
from autotune.strategies.autotune import (
    ACCURACY_VIOLATION,
    SAMPLER_EVERY,
    UNSUPPORTED_LIKE,
    Ledger,
    config_key,
    designed_configs,
)
from autotune.strategies.autotune import NAME as STRATEGY
from autotune.strategies.batch_sizes import batch_lean
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import stored_trials
from tests.coordinator_support import small_space
from tests.replay_tables import (
    BASELINE,
    COLUMNS,
    config_of,
    recorded_rows,
    write_request,
    write_table,
)
from tests.strategy_support import ONNX, SMALL_BASELINE, load_benchmark, request


def tune(
    directory: Path,
    budget: int,
    workers: int = 1,
    rows: list[dict[str, Any]] | None = None,
    **request: Any,
) -> list[TrialRecord]:
    table = write_table(directory / "table.csv", recorded_rows() if rows is None else rows)
    storage = f"sqlite:///{directory / 'study.db'}"
    options = TuneOptions(
        trials=budget,
        replay=table,
        storage=storage,
        study="s",
        workers=workers,
        seed=0,
        sampler=STRATEGY,
        out_dir=directory / "out",
    )
    run_tune(write_request(directory, **request), options)
    return stored_trials(storage, "s")


def measured_configs(trials: list[TrialRecord]) -> list[str]:
    return [str(sorted(t.config.items())) for t in trials if t.measured]


@pytest.mark.slow
def test_repeats_are_told_from_the_study_not_measured(tmp_path: Path) -> None:
    trials = tune(tmp_path, budget=40)
    distinct = len(recorded_rows()) + 2  # onnxruntime at 0.6 is not in the table
    configs = measured_configs(trials)
    assert sum(t.status != "skipped" for t in trials) == 40  # skips are free
    assert len(configs) == len(set(configs)) <= distinct
    repeats = [t for t in trials if t.reused_from is not None]
    assert repeats, "a budget larger than the space must repeat proposals"
    for trial in repeats:
        assert trial.measured is False
        study_name, number = trial.reused_from.split("#")
        original = trials[int(number)]
        assert study_name == "s" and original.measured
        assert original.config == trial.config
        assert trial.state == original.state
        assert trial.values == original.values


@pytest.mark.slow
def test_known_infeasible_variant_is_not_measured(tmp_path: Path) -> None:
    # Pruning at 0.6 costs 3 points of accuracy: beyond a 0.02 bound, once that is known.
    trials = tune(tmp_path, budget=40)
    baseline = trials[0].metrics["accuracy"]
    violating: set[str] = set()
    for trial in sorted(trials, key=lambda t: t.ended_at):
        variant = trial.variant_key
        if variant in violating and trial.reused_from is None:
            assert not trial.measured
            assert trial.state == "pruned"
            assert trial.reason == ACCURACY_VIOLATION
        metrics = trial.metrics
        if metrics is not None and baseline - metrics["accuracy"] > 0.02:
            violating.add(variant)
    assert violating


@pytest.mark.slow
def test_designed_set_follows_the_baseline(tmp_path: Path) -> None:
    trials = tune(tmp_path, budget=6)
    configs = [t.config for t in trials]
    assert configs[0] == BASELINE
    # One engine besides the baseline's, unpruned, at the middle batch size: the default
    # objectives (accuracy, p95 per call, energy per sample) span both ends of the range.
    assert configs[1] == {**BASELINE, "runtime.engine": "onnxruntime", "batch.size": 8}
    assert trials[1].marks.proposed == "designed"


@pytest.mark.slow
def test_designed_set_of_a_throughput_request_runs_large_batches(tmp_path: Path) -> None:
    trials = tune(tmp_path, budget=6, selection={"strategy": "highest_throughput"})
    configs = [t.config for t in trials]
    assert configs[1] == {**BASELINE, "runtime.engine": "onnxruntime", "batch.size": 8}
    assert trials[1].marks.proposed == "designed"


@pytest.mark.slow
def test_out_of_order_slots_tell_each_trial_once_and_measure_each_config_once(
    tmp_path: Path,
) -> None:
    trials = tune(tmp_path, budget=30, workers=3)
    finished = ("complete", "pruned")
    assert len([t for t in trials if t.status != "skipped"]) == 30  # skips are not in the budget
    assert all(t.state in finished for t in trials)
    configs = measured_configs(trials)
    assert len(configs) == len(set(configs))
    completed = sorted(trials, key=lambda t: t.ended_at)
    assert [t.number for t in completed] != sorted(t.number for t in completed)


def test_benchmark_true_hypervolume_of_a_hand_made_table(tmp_path: Path) -> None:
    bench = load_benchmark()
    rows = [
        {**BASELINE, "status": "ok", "accuracy": 0.9, "latency_p95_ms": 4.0,
         "energy_per_sample_j": 1.0},
        {**BASELINE, "batch.size": 8, "status": "ok", "accuracy": 0.9, "latency_p95_ms": 2.0,
         "energy_per_sample_j": 2.0},
        {**BASELINE, "runtime.engine": "onnxruntime", "status": "ok", "accuracy": 0.5,
         "latency_p95_ms": 1.0, "energy_per_sample_j": 0.5},
    ]  # fmt: skip
    for row in rows:
        row.setdefault("prune.ratio", "")
    table = ReplayTable.load(write_table(tmp_path / "t.csv", rows, COLUMNS))
    constraints = {"max_accuracy_drop": 0.02}
    request = load_request(write_request(tmp_path, constraints=constraints), replay=True)
    truth = bench.true_front(table, BASELINE, request)
    # The third row loses 0.4 of accuracy: infeasible. The front is the first two rows:
    # nadir (-0.9, 4, 2); the front's extent is 0 in accuracy, 2 in latency, 1 in energy.
    assert truth.feasible == 2 and truth.front_size == 2 and truth.ok == 3
    reference = np.array([-0.9 + 1e-9, 4.2, 2.1])
    assert truth.reference == pytest.approx(reference)
    # Two boxes: (4.2-4)*(2.1-1) + (4.2-2)*(2.1-2) - nothing shared beyond: union by hand.
    union = 1e-9 * ((4.2 - 4.0) * (2.1 - 1.0) + (4.0 - 2.0) * (2.1 - 2.0))
    assert truth.hypervolume == pytest.approx(union, rel=1e-6)
    run = bench.Run("x", 0, [0.5, 0.96, 1.0], [1.0, 3.0, 4.0])
    assert run.to_target(10) == (2, 3.0)
    assert bench.Run("x", 0, [0.5], [1.0]).to_target(10) == (11, None)


@pytest.mark.slow
def test_benchmark_curve_counts_only_measurements(tmp_path: Path) -> None:
    bench = load_benchmark()
    trials = tune(tmp_path, budget=30)
    table = ReplayTable.load(tmp_path / "table.csv")
    request = load_request(tmp_path / "request.yaml", replay=True)
    truth = bench.true_front(table, BASELINE, request)
    fractions, seconds = bench.curve(trials, table, truth)
    assert len(fractions) == len(measured_configs(trials)) < 30
    assert fractions == sorted(fractions) and fractions[-1] <= 1.0 + 1e-9
    rows = {str(sorted(config_of(r).items())): r for r in recorded_rows()}
    expected = sum(float(rows[c]["measure_seconds"]) for c in measured_configs(trials) if c in rows)
    assert seconds[-1] == pytest.approx(expected)


def test_designed_set_gives_dimensions_that_become_active_their_baseline() -> None:
    designed = designed_configs(small_space())
    middle = {"batch.size": 8}
    assert designed == [
        {**SMALL_BASELINE, **middle},
        {**ONNX, **middle},  # graph_opt becomes active: at its baseline
        {**SMALL_BASELINE, **middle, "precision.mode": "int8_static"},
        {**ONNX, **middle, "precision.mode": "int8_static"},
    ]


PER_CALL = request(objectives=["accuracy", "latency"])  # lowest_latency, the default
# A bound per sample keeps larger batches within the front's reach beside latency per call.
AT_LEAST = {"min_throughput_per_s": 100.0}
PER_CALL_BOUNDED_PER_SAMPLE = request(objectives=["accuracy", "latency"], constraints=AT_LEAST)
THROUGHPUT_MINDED = [
    request(
        objectives=["accuracy", "latency"],
        selection={"strategy": "highest_throughput"},
        constraints=AT_LEAST,
    ),
    request(objectives=["accuracy", "throughput"]),
    request(objectives=["accuracy", "latency_per_sample", "energy"]),
]
BOTH_VIEWS = request()  # lowest_latency over accuracy, latency and energy


def chosen(strategy: str, **weights: float) -> dict[str, Any]:
    return {"strategy": strategy, **({"weights": weights} if weights else {})}


@pytest.mark.parametrize(
    ("objectives", "selection", "bounds", "lean"),
    [
        # the defaults, lowest_latency over accuracy, latency and energy: a front over both
        # views spans both ends of the batch range, whatever the selection
        (None, None, [], None),
        (None, chosen("highest_throughput"), [], None),
        (["accuracy", "latency", "throughput"], None, [], None),
        (None, chosen("weighted", throughput=2, latency=1), [], None),
        (["accuracy", "latency"], None, [], "per_call"),
        (["accuracy", "latency"], chosen("highest_accuracy"), [], "per_call"),
        # latency per call the only time objective: a larger batch is dominated, whatever
        # the selection picks from the front; a bound per sample keeps larger batches
        (["accuracy", "latency"], chosen("highest_throughput"), [], "per_call"),
        (["accuracy", "latency"], chosen("highest_throughput"), ["max_latency_p95_ms"], "per_call"),
        (["accuracy", "latency"], chosen("highest_throughput"), [*AT_LEAST], "per_sample"),
        (["accuracy", "latency"], None, [*AT_LEAST], "per_call"),
        (["accuracy", "energy"], chosen("lowest_energy"), [], "per_sample"),
        (["accuracy", "throughput"], None, [], "per_sample"),
        (["accuracy", "latency_per_sample"], None, [], "per_sample"),
        (["accuracy"], chosen("highest_throughput"), [], "per_sample"),
        (["accuracy"], chosen("highest_accuracy"), [], None),
        (["accuracy"], chosen("weighted", throughput=2, latency=1), [], "per_sample"),
        (["accuracy"], chosen("weighted", latency_per_sample=1, latency=2), [], "per_call"),
        (["accuracy"], chosen("weighted", accuracy=1), [], None),
    ],
)
def test_batch_lean_follows_the_selection_objectives_and_bounds(
    objectives: list[str] | None,
    selection: dict[str, Any] | None,
    bounds: list[str],
    lean: str | None,
) -> None:
    fields = {"objectives": objectives, "selection": selection}
    parsed = request(**{k: v for k, v in fields.items() if v is not None})
    assert batch_lean(parsed.selection, parsed.objectives, bounds) == lean


def test_designed_set_runs_large_batches_for_throughput_and_batch_one_per_call() -> None:
    def batches(req: TuningRequest | None) -> set[Any]:
        return {c["batch.size"] for c in designed_configs(small_space(), req)}

    assert batches(PER_CALL) == {1}
    for minded in THROUGHPUT_MINDED:
        assert batches(minded) == {64}
    assert batches(request(selection={"strategy": "highest_accuracy"})) == {8}
    # Objectives over both views, picked per call: the middle, and each engine at batch 1.
    assert batches(BOTH_VIEWS) == {8, 1}
    assert batches(request(selection={"strategy": "highest_throughput"})) == {8}
    assert batches(None) == {8}
    # The same precisions and engines either way: only the batch size moves (at batch 1 the
    # baseline's own precision and engine are the baseline, which is measured anyway).
    per_call = designed_configs(small_space(), PER_CALL)
    per_sample = designed_configs(small_space(), THROUGHPUT_MINDED[0])
    assert per_sample[0] == {**SMALL_BASELINE, "batch.size": 64}
    assert [{**c, "batch.size": 64} for c in per_call] == per_sample[1:]


def test_a_per_call_selection_over_both_views_meets_each_engine_at_batch_one() -> None:
    """After each precision on each engine at the middle batch, each other engine at batch 1
    in the baseline's precision: the batch a lowest-latency choice is made at."""
    designed = designed_configs(small_space(), BOTH_VIEWS)
    middle = designed_configs(small_space(), request(selection={"strategy": "highest_accuracy"}))
    assert designed[: len(middle)] == middle
    assert designed[len(middle) :] == [{**ONNX, "batch.size": 1}]


def test_a_design_never_runs_at_a_batch_whose_baseline_call_passed_the_bound() -> None:
    call_ms = {1: 1.0, 8: 600.0}  # the scan stopped at 8: its call passed 500 ms
    per_sample = request(objectives=["accuracy", "throughput"])
    for req in (per_sample, BOTH_VIEWS, PER_CALL):
        assert {c["batch.size"] for c in designed_configs(small_space(), req, call_ms)} == {1}


@pytest.mark.parametrize(
    ("call_ms", "expected"),
    [
        ({1: 1.0, 8: 2.0, 64: 15.5}, 8),  # 0.25 ms a sample at 8, within 5% of 0.242 at 64
        ({1: 1.0, 8: 2.0, 64: 14.0}, 64),  # 0.219 at 64: 8 is 14% slower a sample
        ({1: 1.0, 8: 2.0}, 8),  # the scan stopped at 8 (its call passed the bound)
        ({1: 1.0}, 1),
        ({}, 64),  # no call times: the largest
    ],
)
def test_a_per_sample_design_runs_where_the_baseline_time_per_sample_levels_off(
    call_ms: dict[int, float], expected: int
) -> None:
    designed = designed_configs(small_space(), THROUGHPUT_MINDED[1], call_ms)
    assert {c["batch.size"] for c in designed} == {expected}
    assert {c["batch.size"] for c in designed_configs(small_space(), PER_CALL, call_ms)} == {1}
    assert {c["batch.size"] for c in designed_configs(small_space(), BOTH_VIEWS, call_ms)} == {8, 1}


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        # per sample: toward the larger batch first, the smaller only after the kernel choice
        (THROUGHPUT_MINDED[0], [64, "basic", 1]),
        # per call, where a bound per sample keeps larger batches: the other way round
        (PER_CALL_BOUNDED_PER_SAMPLE, [1, "basic", 64]),
        # neither: both batch sizes one step away, in the space's order, then the kernel
        (None, [1, 64, "basic"]),
        # objectives over both views: both batch sizes before the kernel choice, the
        # selection's side first
        (BOTH_VIEWS, [1, 64, "basic"]),
        (request(selection={"strategy": "highest_throughput"}), [64, 1, "basic"]),
    ],
)
def test_local_search_steps_batch_size_toward_the_request(
    req: TuningRequest | None, expected: list[Any]
) -> None:
    ledger = Ledger(small_space(), designed=[], request=req)
    point = {**ONNX, "batch.size": 8}
    ledger.proposed.add(config_key(point))
    proposals = [ledger.next_proposal(lambda: [point], set()) for _ in range(SAMPLER_EVERY - 1)]
    options = {
        64: {**point, "batch.size": 64},
        1: {**point, "batch.size": 1},
        "basic": {**point, "runtime.graph_opt": "basic"},
    }
    assert proposals == [(options[e], "neighbour") for e in expected]


def test_local_search_passes_over_a_batch_size_the_limits_block() -> None:
    """Batch 64 is blocked (its call would be too long): the per-sample search goes to the
    kernel choice and batch 1 instead of spending a trial on a skip."""
    ledger = Ledger(small_space(), designed=[], request=THROUGHPUT_MINDED[0])
    point = {**ONNX, "batch.size": 8}
    ledger.proposed.add(config_key(point))

    def blocked(config: dict[str, Any]) -> bool:
        return config["batch.size"] == 64

    proposals = [ledger.next_proposal(lambda: [point], set(), blocked) for _ in range(2)]
    assert proposals == [
        ({**point, "runtime.graph_opt": "basic"}, "neighbour"),
        ({**point, "batch.size": 1}, "neighbour"),
    ]


def test_outcomes_recorded_before_per_sample_latency_load_with_it_derived() -> None:
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    old = {
        "accuracy": 0.9, "accuracy_drop": 0.0, "latency_p50_ms": 2.0, "latency_p90_ms": 2.0,
        "latency_p95_ms": 2.0, "latency_p99_ms": 2.0, "latency_mean_ms": 2.0, "latency_cv": 0.0,
        "throughput_per_s": 4000.0, "energy_per_sample_j": 0.01, "energy_source": "estimate",
        "peak_memory_mb": 10.0, "iterations": 50, "measure_seconds": 0.1,
    }  # fmt: skip
    attrs = {"config": {**ONNX, "batch.size": 8}, "status": "ok", "metrics": old}
    study.add_trial(optuna.trial.create_trial(values=[0.9, 2.0, 0.01], user_attrs=attrs))
    ledger = Ledger(small_space(), designed=[], request=PER_CALL)
    ledger.load([record_of(t) for t in study.trials])
    outcome = ledger.finished[config_key(attrs["config"])]
    assert outcome.metrics is not None
    assert outcome.metrics.latency_per_sample_ms == pytest.approx(0.25)


def test_local_search_walks_the_fronts_neighbours_nearest_first() -> None:
    ledger = Ledger(small_space(), designed=[])
    front = [SMALL_BASELINE, ONNX]
    ledger.proposed.update(config_key(c) for c in front)  # measured: not proposed again
    excluded = {
        variant_key({**SMALL_BASELINE, "precision.mode": "int8_static"}),
        variant_key({**SMALL_BASELINE, "prune.method": "magnitude", "prune.ratio": 0.3}),
    }
    proposals = [ledger.next_proposal(lambda: front, excluded) for _ in range(8)]
    assert proposals[: SAMPLER_EVERY - 1] == [
        ({**SMALL_BASELINE, "batch.size": 8}, "neighbour"),  # one step along batch size
        ({**SMALL_BASELINE, "batch.size": 64}, "neighbour"),  # the rest is known or excluded
        ({**ONNX, "batch.size": 8}, "neighbour"),  # the next front point's
    ]
    assert proposals[SAMPLER_EVERY - 1] is None  # the sampler's turn
    assert proposals[SAMPLER_EVERY : SAMPLER_EVERY + 3] == [
        ({**ONNX, "runtime.graph_opt": "basic"}, "neighbour"),  # kernel before variant
        ({**ONNX, "precision.mode": "int8_static"}, "neighbour"),
        # pruning becomes active: the ratio at its baseline
        ({**ONNX, "prune.method": "magnitude", "prune.ratio": 0.3}, "neighbour"),
    ]


def test_unbuildable_in_one_batch_size_is_not_proposed_in_another(tmp_path: Path) -> None:
    table = ReplayTable.load(write_table(tmp_path / "t.csv", recorded_rows()))
    ledger = Ledger(small_space(), designed=[])
    unbuildable = ONNX
    trial = TrialSpec(study="s", trial_number=3, workload=table.workload(), config=unbuildable)
    ledger.settle(3, trial, TrialResult.for_spec(trial, "unsupported", "no kernel"))
    like = ledger.unsupported_like({**unbuildable, "batch.size": 8})
    assert like is not None and like.trial_number == 3
    assert ledger.unsupported_like({**unbuildable, "prune.method": "magnitude"}) is None
    proposed = [
        ledger.next_proposal(lambda: [unbuildable], set()) for _ in range(SAMPLER_EVERY - 1)
    ]
    assert ({**unbuildable, "batch.size": 8}, "neighbour") not in proposed


@pytest.mark.slow
def test_a_repeat_of_an_unbuildable_configuration_is_not_measured(tmp_path: Path) -> None:
    # onnxruntime with pruning cannot be built, at either batch size.
    rows = recorded_rows()
    for row in rows:
        if row["runtime.engine"] == "onnxruntime" and row["prune.method"] != "none":
            row.update(status="unsupported", reason="no kernel for it")
            for metric in ("accuracy", "latency_p95_ms", "energy_per_sample_j"):
                row.pop(metric, None)
    trials = tune(tmp_path, budget=30, rows=rows, constraints={"max_accuracy_drop": 0.5})
    by_ratio: dict[float, list[TrialRecord]] = {}
    for trial in trials:
        config = trial.config
        if config["runtime.engine"] == "onnxruntime" and config["prune.method"] != "none":
            by_ratio.setdefault(config["prune.ratio"], []).append(trial)
    skipped = 0
    for trials in by_ratio.values():
        (first,) = [t for t in trials if t.measured]  # one batch size measured, per ratio
        for trial in trials:
            if trial is not first and trial.reused_from is None:
                assert not trial.measured and trial.state == "pruned"
                assert trial.reason.startswith(UNSUPPORTED_LIKE)
                assert f"#{first.number}:" in trial.reason
                skipped += 1
    assert skipped
