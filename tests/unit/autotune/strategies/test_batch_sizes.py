"""Where a larger batch can only be dominated (latency per call the only time objective),
autotune's strategy spends no trial on one: not in its designed set, its local search or its
sampler; a study with a figure per sample still explores larger batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.core.contract import ConfigValue, TrialMetrics, TrialSpec
from autotune.requests.request import parse_request
from autotune.search.budget import SearchBudget
from autotune.search.coordinator import Coordinator, Tuning
from autotune.space.search_space import EffectiveSpace
from autotune.strategies import make_strategy
from autotune.strategies.autotune import SAMPLER_EVERY, Ledger, config_key, designed_configs
from autotune.strategies.batch_sizes import larger_batches_dominated
from tests.coordinator_support import (
    INFO,
    PROFILE,
    WORKLOAD,
    Dimension,
    RecordingTracker,
    ScriptedExecutor,
    deadline,
    make_request,
    open_store,
    small_space,
    space_of,
    table_metrics,
)

BATCHES: list[ConfigValue] = [1, 2, 4, 8, 16, 32, 64, 128]
PER_CALL = ["accuracy", "latency"]


@pytest.mark.parametrize(
    ("objectives", "bounds", "dominated"),
    [
        (PER_CALL, [], True),
        # bounds that a larger batch cannot help meet
        (PER_CALL, ["max_latency_p95_ms", "max_accuracy_drop", "max_memory_mb"], True),
        # a bound per sample: only a larger batch may meet it
        (PER_CALL, ["min_throughput_per_s"], False),
        (PER_CALL, ["max_energy_per_sample_j"], False),
        (["accuracy", "latency", "throughput"], [], False),
        (["accuracy", "latency", "energy"], [], False),
        (["accuracy", "throughput"], [], False),
        # no objective moves with the batch: its sizes tie, and the selection decides
        (["accuracy"], [], False),
    ],
)
def test_larger_batches_are_dominated_only_where_no_objective_or_bound_gains_from_them(
    objectives: list[str], bounds: list[str], dominated: bool
) -> None:
    assert larger_batches_dominated(objectives, bounds) is dominated


def issue_space() -> EffectiveSpace:
    """The issue's shape: two engines (one with a kernel option), three thread counts, eight
    batch sizes, two precisions (int8 loses accuracy)."""
    dims: list[Dimension] = [
        ("runtime.engine", ["torch_eager", "openvino"], {}),
        ("runtime.ov_hint", ["latency", "throughput"], {"runtime.engine": ["openvino"]}),
        ("runtime.threads", [2, 1, 4], {}),
        ("batch.size", BATCHES, {}),
        ("precision.mode", ["fp32", "int8_static"], {}),
    ]
    return space_of("issue", dims)


def openvino_fastest(spec: TrialSpec) -> TrialMetrics:
    """Per call slower with each larger batch, cheaper per sample (`table_metrics`); OpenVINO
    four times as fast as torch eager, one thread three times as slow as two."""
    metrics = table_metrics(spec.config)
    config = spec.config
    engine = 0.25 if config["runtime.engine"] == "openvino" else 1.0
    threads = 1.0 if config["runtime.threads"] == 2 else 3.0
    latency = metrics.latency_p95_ms * engine * threads
    figures = {f"latency_{p}_ms": latency for p in ("p50", "p90", "p95", "p99", "mean")}
    throughput = 1000 * int(config["batch.size"]) / latency
    return metrics.model_copy(update={**figures, "throughput_per_s": throughput})


def measured(objectives: list[str], trials: int) -> list[tuple[str, dict[str, Any]]]:
    """Why each trial the coordinator measured was proposed ("designed", "neighbour",
    "sampler" or "baseline") and its configuration, in order, searching the issue's space
    with autotune's strategy."""
    space = issue_space()
    request = make_request(trials, objectives=objectives, constraints={"max_accuracy_drop": 0.01})
    strategy = make_strategy("autotune", space, request, seed=0)
    executor = ScriptedExecutor(openvino_fastest)
    store = open_store(request, strategy, space)
    coordinator = Coordinator(
        Tuning(request, WORKLOAD, INFO, space, PROFILE, Path("unused-artifacts")),
        store,
        strategy,
        executor,
        RecordingTracker(),
        SearchBudget(trials, None),
    )
    with deadline(30.0):
        coordinator.search()
    records = {record.number: record for record in store.records()}
    marks = [records[spec.trial_number].marks for spec in executor.submitted]
    whys = [m.proposed or ("baseline" if m.baseline else "sampler") for m in marks]
    return list(zip(whys, executor.measured_configs(), strict=True))


def without_batch(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return config_key({k: v for k, v in config.items() if k != "batch.size"})


def test_a_per_call_study_measures_no_larger_batch_of_a_measured_configuration() -> None:
    """The issue: latency per call the only time objective; before, once the designed set
    had found OpenVINO fastest at batch 1, its local search measured OpenVINO at batch 2, 4,
    ... 128, each one dominated by batch 1."""
    trials = measured(PER_CALL, trials=24)
    assert {"designed", "neighbour", "sampler"} <= {why for why, _ in trials}
    smallest: dict[tuple[tuple[str, Any], ...], int] = {}
    for why, config in trials:
        below = smallest.setdefault(without_batch(config), config["batch.size"])
        assert config["batch.size"] <= below, f"{why} at a larger batch: {config}"
    assert {config["batch.size"] for _, config in trials} == {1}


def test_a_study_with_a_figure_per_sample_still_explores_larger_batches() -> None:
    for objectives in (["accuracy", "throughput"], ["accuracy", "latency", "energy"]):
        batches: dict[tuple[tuple[str, Any], ...], set[int]] = {}
        for _, config in measured(objectives, trials=24):
            batches.setdefault(without_batch(config), set()).add(config["batch.size"])
        assert max(len(sizes) for sizes in batches.values()) >= 3, objectives


SPACE_BASELINE = small_space().baseline()
ONNX = {**SPACE_BASELINE, "runtime.engine": "onnxruntime", "runtime.graph_opt": "all"}


def proposals(ledger: Ledger, point: dict[str, Any], count: int) -> list[dict[str, Any]]:
    found = [ledger.next_proposal(lambda: [point], set()) for _ in range(count)]
    return [proposal[0] for proposal in found if proposal is not None]


def per_call_ledger() -> Ledger:
    return Ledger(small_space(), designed=[], request=make_request(10, objectives=PER_CALL))


def test_a_front_point_at_a_large_batch_steps_straight_to_the_smallest() -> None:
    """Its sibling at batch 1 is not known yet: that one comes first (it dominates the
    point), and batch 8 never (batch 1 is known from then on)."""
    ledger = per_call_ledger()
    point = {**ONNX, "batch.size": 64}
    ledger.proposed.add(config_key(point))
    offered = proposals(ledger, point, 4 * SAMPLER_EVERY)
    assert offered[0] == {**point, "batch.size": 1}
    assert {**point, "batch.size": 8} not in offered
    assert len(offered) > 1, "the point's other neighbours are still proposed"


def test_no_neighbour_is_proposed_whose_smaller_batch_sibling_is_known() -> None:
    point = {**ONNX, "batch.size": 8}
    basic = {**point, "runtime.graph_opt": "basic"}
    per_call, without_request = per_call_ledger(), Ledger(small_space(), designed=[])
    for ledger in (per_call, without_request):
        ledger.proposed.update(config_key(c) for c in (point, {**basic, "batch.size": 1}))
    offered = proposals(per_call, point, 4 * SAMPLER_EVERY)
    assert offered[0] == {**point, "batch.size": 1}
    assert basic not in offered and {**point, "batch.size": 64} not in offered
    # the rule leaves them out, not the order: without a request both come within a round
    unruled = proposals(without_request, point, SAMPLER_EVERY - 1)
    assert basic in unruled and {**point, "batch.size": 64} in unruled


@pytest.mark.parametrize("selection", ["lowest_latency", "highest_throughput"])
def test_a_per_call_design_runs_at_the_smallest_batch_whatever_the_selection(
    selection: str,
) -> None:
    req = parse_request(
        {"name": "r", "objectives": PER_CALL, "selection": {"strategy": selection}}, replay=True
    )
    assert {c["batch.size"] for c in designed_configs(issue_space(), req)} == {1}
