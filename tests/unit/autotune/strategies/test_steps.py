"""The strategy's targeted steps: a per-sample selection's best climbs past the level-off batch
while a step up still pays; a configuration too slow at its batch is tried at a smaller one; an
int8 variant that breaks the accuracy bound is tried with more nodes in float, as many as its
model's sensitivity ranking predicts to meet the bound."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core.contract import ConfigValue, TrialResult, TrialSpec
from autotune.core.contract.trials import NodeSensitivity, SensitivityTable
from autotune.core.knobs import variant_key
from autotune.strategies.autotune import SAMPLER_EVERY, AutotuneStrategy, Ledger, config_key
from autotune.strategies.steps import CLIMB_GAIN
from tests.coordinator_support import (
    WORKLOAD,
    scripted_provenance,
    small_space,
    space_of,
    table_metrics,
)
from tests.strategy_support import ONNX, request

THROUGHPUT = request(selection={"strategy": "highest_throughput"})


def settled(ledger: Ledger, config: dict[str, ConfigValue], throughput: float) -> None:
    """`config` measured at `throughput` samples a second."""
    spec = TrialSpec(study="s", trial_number=len(ledger.finished), config=config, workload=WORKLOAD)
    metrics = table_metrics(config).model_copy(update={"throughput_per_s": throughput})
    ledger.settle(spec.trial_number, spec, TrialResult.for_spec(spec, "ok", None, 0.0, metrics))


def at(batch: int, **changes: Any) -> dict[str, ConfigValue]:
    return {**ONNX, "batch.size": batch, **changes}


def first_proposal(ledger: Ledger, front: list[dict[str, ConfigValue]], **kwargs: Any) -> Any:
    return ledger.next_proposal(lambda: front, set(), **kwargs)


def test_the_best_point_climbs_while_its_last_step_up_gained() -> None:
    ledger = Ledger(small_space(), designed=[], request=THROUGHPUT)
    settled(ledger, at(1), 100.0)
    settled(ledger, at(8), 700.0)
    assert first_proposal(ledger, [at(8), at(1)]) == (at(64), "climb")


def test_the_climb_starts_from_the_selections_best_not_the_fronts_first_point() -> None:
    ledger = Ledger(small_space(), designed=[], request=THROUGHPUT)
    settled(ledger, at(1), 100.0)
    settled(ledger, at(8), 700.0)
    settled(ledger, at(1, **{"runtime.graph_opt": "basic"}), 300.0)
    front = [at(1, **{"runtime.graph_opt": "basic"}), at(8)]
    assert first_proposal(ledger, front) == (at(64), "climb")


def test_a_step_up_that_gained_within_the_noise_ends_the_climb() -> None:
    ledger = Ledger(small_space(), designed=[], request=THROUGHPUT)
    settled(ledger, at(1), 700.0)
    settled(ledger, at(8), 700.0 * (1 + CLIMB_GAIN / 2))
    proposal = first_proposal(ledger, [at(8), at(1)])
    assert proposal is not None and proposal[1] == "neighbour"


def test_no_climb_to_a_blocked_batch_nor_past_the_largest_nor_for_a_per_call_selection() -> None:
    ledger = Ledger(small_space(), designed=[], request=THROUGHPUT)
    settled(ledger, at(1), 100.0)
    settled(ledger, at(8), 700.0)

    def too_long(config: dict[str, ConfigValue]) -> bool:
        return config["batch.size"] == 64

    assert first_proposal(ledger, [at(8)], blocked=too_long)[1] == "neighbour"
    settled(ledger, at(64), 900.0)  # the climb's step: measured, and the largest batch
    assert first_proposal(ledger, [at(64)])[1] == "neighbour"
    per_call = Ledger(small_space(), designed=[], request=request())
    settled(per_call, at(1), 100.0)
    settled(per_call, at(8), 700.0)
    per_call.proposed.add(config_key(at(8)))
    proposals = [first_proposal(per_call, [at(8)]) for _ in range(SAMPLER_EVERY - 1)]
    assert all(p is None or p[1] != "climb" for p in proposals)


def too_slow(ledger: Ledger, config: dict[str, ConfigValue], call_ms: float) -> None:
    spec = TrialSpec(study="s", trial_number=len(ledger.finished), config=config, workload=WORKLOAD)
    result = TrialResult.for_spec(spec, "too_slow", "a call took ...")
    ledger.settle(spec.trial_number, spec, result.model_copy(update={"slow_call_ms": call_ms}))


def test_a_configuration_too_slow_at_its_batch_is_tried_next_at_a_smaller_one() -> None:
    bound = request(measurement={"max_call_ms": 100.0})
    ledger = Ledger(small_space(), designed=[at(64)], request=bound)
    ledger.proposed.add(config_key(at(64)))
    too_slow(ledger, at(64), 2000.0)  # 31 ms a sample: 8 samples take 250 ms, 1 takes 31
    assert first_proposal(ledger, [at(1)]) == (at(1), "smaller batch")
    too_slow(ledger, at(8, **{"runtime.graph_opt": "basic"}), 500.0)  # 62.5 ms a sample
    blocked = at(1, **{"runtime.graph_opt": "basic"})
    assert first_proposal(ledger, [], blocked=lambda c: c == blocked) != (blocked, "smaller batch")


def test_no_smaller_batch_is_tried_where_even_the_smallest_would_be_too_slow() -> None:
    ledger = Ledger(small_space(), designed=[], request=request(measurement={"max_call_ms": 10.0}))
    too_slow(ledger, at(8), 800.0)  # 100 ms a sample
    assert ledger.retries == []


def test_a_smaller_batch_the_search_would_skip_gives_way_to_the_next_smaller() -> None:
    ledger = Ledger(small_space(), designed=[], request=request(measurement={"max_call_ms": 100.0}))
    too_slow(ledger, at(64), 640.0)  # 10 ms a sample: 8 and 1 both within 100 ms

    def estimated_too_long(config: dict[str, ConfigValue]) -> bool:
        return config["batch.size"] == 8

    assert first_proposal(ledger, [], blocked=estimated_too_long) == (at(1), "smaller batch")


def int8_space() -> Any:
    return space_of(
        "int8",
        [
            ("runtime.engine", ["onnxruntime"], {}),
            ("batch.size", [1, 8], {}),
            ("precision.mode", ["fp32", "int8_static"], {}),
            ("precision.fallback", [0, 1, 2, 4], {"precision.mode": ["int8_static"]}),
        ],
    )


def int8(fallback: int) -> dict[str, ConfigValue]:
    return {
        "runtime.engine": "onnxruntime",
        "batch.size": 1,
        "precision.mode": "int8_static",
        "precision.fallback": fallback,
    }


def test_an_int8_variant_that_breaks_the_bound_is_tried_next_with_more_nodes_in_float() -> None:
    within_bound = Ledger(int8_space(), designed=[], request=request())
    settled(within_bound, int8(0), 100.0)
    assert within_bound.next_proposal(lambda: [], set()) is None  # nothing to step from
    ledger = Ledger(int8_space(), designed=[], request=request())
    settled(ledger, int8(0), 100.0)
    excluded = {variant_key(int8(0))}
    assert ledger.next_proposal(lambda: [], excluded) == (int8(1), "fallback")
    settled(ledger, int8(1), 100.0)  # still breaks the bound: one more step
    excluded.add(variant_key(int8(1)))
    assert ledger.next_proposal(lambda: [], excluded) == (int8(2), "fallback")
    settled(ledger, int8(2), 100.0)  # meets it: no further step
    proposal = ledger.next_proposal(lambda: [], excluded)
    assert proposal is None or proposal[1] != "fallback"


def calibrated_space() -> Any:
    return space_of(
        "calibrated",
        [
            ("runtime.engine", ["onnxruntime"], {}),
            ("batch.size", [1, 8], {}),
            ("precision.mode", ["fp32", "int8_dynamic", "int8_static"], {}),
            (
                "precision.fallback",
                [0, 1, 2],
                {"precision.mode": ["int8_dynamic", "int8_static"]},
            ),
            (
                "precision.calibration",
                ["minmax", "entropy", "percentile"],
                {"precision.mode": ["int8_static"]},
            ),
        ],
    )


def static(calibration: str, fallback: int = 0) -> dict[str, ConfigValue]:
    return {**int8(fallback), "precision.calibration": calibration}


def breaks_the_bound(
    ledger: Ledger, config: dict[str, ConfigValue], excluded: set[str], accuracy: float = 0.5
) -> None:
    accuracy_measured(ledger, config, accuracy)
    excluded.add(variant_key(config))


def test_a_static_int8_variant_that_breaks_the_bound_is_recalibrated_before_more_in_float() -> None:
    ledger = Ledger(calibrated_space(), designed=[], request=request())
    excluded: set[str] = set()
    breaks_the_bound(ledger, static("minmax"), excluded)
    assert ledger.next_proposal(lambda: [], excluded) == (static("percentile"), "calibration")
    waiting = ledger.next_proposal(lambda: [], excluded)  # entropy waits for the percentile
    assert waiting is None or waiting[1] not in ("calibration", "fallback")
    breaks_the_bound(ledger, static("percentile"), excluded, accuracy=0.7)
    assert ledger.next_proposal(lambda: [], excluded) == (static("entropy"), "calibration")
    breaks_the_bound(ledger, static("entropy"), excluded, accuracy=0.6)
    # More in float from the most accurate calibration, the percentile's.
    assert ledger.next_proposal(lambda: [], excluded) == (static("percentile", 1), "fallback")
    # One chain raises one fallback: not the minmax's nor the entropy's as well.
    proposal = ledger.next_proposal(lambda: [], excluded)
    assert proposal is None or proposal[1] not in ("calibration", "fallback")


def test_a_calibration_that_holds_the_bound_ends_the_steps() -> None:
    ledger = Ledger(calibrated_space(), designed=[], request=request())
    excluded: set[str] = set()
    breaks_the_bound(ledger, static("minmax"), excluded)
    assert ledger.next_proposal(lambda: [], excluded) == (static("percentile"), "calibration")
    settled(ledger, static("percentile"), 100.0)  # within the bound
    proposal = ledger.next_proposal(lambda: [], excluded)
    assert proposal is None or proposal[1] not in ("calibration", "fallback")


def test_a_dynamic_int8_variant_that_breaks_the_bound_goes_straight_to_more_in_float() -> None:
    ledger = Ledger(calibrated_space(), designed=[], request=request())
    excluded: set[str] = set()
    breaks_the_bound(ledger, {**int8(0), "precision.mode": "int8_dynamic"}, excluded)
    more = {**int8(1), "precision.mode": "int8_dynamic"}
    assert ledger.next_proposal(lambda: [], excluded) == (more, "fallback")


# Within 0.01 of the baseline's accuracy, and the fallbacks a space offers int8 (0 to 8 nodes).
BOUNDED = request(constraints={"max_accuracy_drop": 0.01})
BASELINE_ACCURACY = 0.90
# Node drops summing to 0.1: with 1, 2, 4 or 8 of them in float, 60%, 30%, 10% or none of the
# drop is left.
SPREAD = (0.04, 0.03, 0.01, 0.01, 0.0025, 0.0025, 0.0025, 0.0025)


def fallback_space() -> Any:
    return space_of(
        "fallback",
        [
            ("runtime.engine", ["onnxruntime"], {}),
            ("batch.size", [1, 8], {}),
            ("precision.mode", ["fp32", "int8_static"], {}),
            ("precision.fallback", [0, 1, 2, 4, 8], {"precision.mode": ["int8_static"]}),
        ],
    )


# The quantizable nodes a ranking leaves unmeasured (as it does past its largest nodes), so
# that the fallbacks these tests step to keep under a quarter of the nodes in float.
UNMEASURED = 24


def ranking(
    *drops: float | None,
    model: str = "a",
    mode: str = "int8_static",
    unmeasured: int = UNMEASURED,
    op_type: str = "Conv",
) -> SensitivityTable:
    nodes = [
        NodeSensitivity(node=f"node{rank}", rank=rank, op_type=op_type, drop=drop)
        for rank, drop in enumerate((*drops, *[None] * unmeasured), start=1)
    ]
    return SensitivityTable(model_sha256=model * 64, mode=mode, seconds=1.0, nodes=nodes)


def accuracy_measured(
    ledger: Ledger,
    config: dict[str, ConfigValue],
    accuracy: float,
    tables: tuple[SensitivityTable, ...] = (),
    model: str = "a",
) -> None:
    """`config` measured at `accuracy`, on model `model` (its sha256 the letter 64 times),
    carrying the sensitivity rankings its variant was built by; an int8 variant calls in
    half the float model's time."""
    spec = TrialSpec(study="s", trial_number=len(ledger.finished), config=config, workload=WORKLOAD)
    metrics = table_metrics(config)
    speed_up = 0.5 if str(config.get("precision.mode")).startswith("int8") else 1.0
    metrics = metrics.model_copy(
        update={"accuracy": accuracy, "latency_p95_ms": metrics.latency_p95_ms * speed_up}
    )
    provenance = scripted_provenance(spec).model_copy(update={"model_sha256": model * 64})
    result = TrialResult.for_spec(spec, "ok", None, 0.0, metrics, provenance)
    ledger.settle(spec.trial_number, spec, result.model_copy(update={"sensitivity": list(tables)}))


def broken_int8(*tables: SensitivityTable, drop: float = 0.05, model: str = "a") -> Ledger:
    """A ledger whose baseline and fully int8 variant (`drop` below it) were measured, with
    `tables` learnt."""
    ledger = Ledger(fallback_space(), designed=[], request=BOUNDED)
    ledger.learn_sensitivity(list(tables))
    accuracy_measured(ledger, fallback_space().baseline(), BASELINE_ACCURACY, model=model)
    accuracy_measured(ledger, int8(0), BASELINE_ACCURACY - drop, model=model)
    return ledger


def next_fallback(ledger: Ledger, excluded: set[str]) -> Any:
    proposal = ledger.next_proposal(lambda: [], excluded)
    return proposal if proposal is None or proposal[1] != "fallback" else proposal[0]


BROKEN = {variant_key(int8(0))}


def test_the_ranking_skips_the_fallbacks_it_predicts_too_few_straight_to_four() -> None:
    # 0.05 x 60% and 0.05 x 30% break the 0.01 bound; 0.05 x 10% meets it.
    assert next_fallback(broken_int8(ranking(*SPREAD)), BROKEN) == int8(4)


@pytest.mark.parametrize(
    ("drops", "smallest"),
    [
        ((0.09, 0.0025, 0.0025, 0.0025, 0.0025), 1),  # one node carries 90%: 0.05 x 10%
        ((0.05, 0.035, 0.0075, 0.0075), 2),  # 0.05 x 50% breaks, 0.05 x 15% meets, as 4, 8
    ],
)
def test_the_step_stops_at_the_smallest_fallback_predicted_to_meet_the_bound(
    drops: tuple[float, ...], smallest: int
) -> None:
    assert next_fallback(broken_int8(ranking(*drops)), BROKEN) == int8(smallest)


def test_where_the_space_offers_too_few_in_float_its_largest_fallback_is_tried() -> None:
    # 0.2 with 8 of 20 measured nodes in float leaves 0.12; 19 would meet 0.01, and 19 of
    # 20 + 60 quantizable nodes is under a quarter of them.
    even = ranking(*([0.01] * 20), unmeasured=60)
    assert next_fallback(broken_int8(even, drop=0.2), BROKEN) == int8(8)


def test_where_the_bound_needs_over_a_quarter_of_the_nodes_in_float_no_fallback_is_tried() -> None:
    # 19 of 20 + 24 nodes in float: int8 cannot pay, and the study spends no trial on it.
    even = ranking(*([0.01] * 20))
    assert next_fallback(broken_int8(even, drop=0.2), BROKEN) is None
    # The same drop carried by one node: one in float is predicted to meet the bound.
    dominant = ranking(0.19, *([0.0005] * 19))
    assert next_fallback(broken_int8(dominant, drop=0.2), BROKEN) == int8(1)


@pytest.mark.parametrize(
    "tables",
    [
        (),
        (ranking(),),  # no node measured
        (ranking(0.0, None, 0.0),),  # no node dropped anything
        (ranking(*SPREAD, mode="int8_dynamic"),),  # another mode's
        (ranking(*SPREAD, model="b"), ranking(*SPREAD, model="c")),  # neither the trial's
    ],
)
def test_without_a_ranking_of_the_model_and_mode_the_fallback_steps_to_the_next(
    tables: tuple[SensitivityTable, ...],
) -> None:
    assert next_fallback(broken_int8(*tables), BROKEN) == int8(1)


def test_without_the_baselines_accuracy_or_a_bound_the_fallback_steps_to_the_next() -> None:
    unmeasured = Ledger(fallback_space(), designed=[], request=BOUNDED)
    unmeasured.learn_sensitivity([ranking(*SPREAD)])
    accuracy_measured(unmeasured, int8(0), 0.85)
    assert next_fallback(unmeasured, BROKEN) == int8(1)
    unbounded = broken_int8(ranking(*SPREAD))
    unbounded.request = request()  # no max_accuracy_drop
    assert next_fallback(unbounded, BROKEN) == int8(1)


def test_the_trials_own_models_ranking_is_used_among_several_of_the_mode() -> None:
    dominant = ranking(0.09, 0.0025, 0.0025, 0.0025, 0.0025, model="a")
    spread = ranking(*SPREAD, model="b")
    assert next_fallback(broken_int8(spread, dominant, model="a"), BROKEN) == int8(1)
    assert next_fallback(broken_int8(dominant, spread, model="b"), BROKEN) == int8(4)
    only_one = broken_int8(ranking(*SPREAD, model="b"), model="a")  # an export's, say
    assert next_fallback(only_one, BROKEN) == int8(4)


def test_a_skip_ahead_that_breaks_the_bound_continues_from_where_it_landed() -> None:
    ledger = broken_int8(ranking(*SPREAD))
    excluded = set(BROKEN)
    assert next_fallback(ledger, excluded) == int8(4)
    ledger.proposed.add(config_key(int8(4)))
    assert next_fallback(ledger, excluded) is None  # waits for 4, skips nothing past it
    accuracy_measured(ledger, int8(4), BASELINE_ACCURACY - 0.02)  # 10% left, but 0.02
    excluded.add(variant_key(int8(4)))
    assert next_fallback(ledger, excluded) == int8(8)


def test_a_ranking_learnt_from_a_fallback_trial_sizes_the_steps_after_it() -> None:
    ledger = broken_int8()
    excluded = set(BROKEN)
    assert next_fallback(ledger, excluded) == int8(1)  # nothing ranked yet
    # 60% of the drop left at 0.03: 0.05 in all, 30% of it with 2 in float, 10% with 4.
    accuracy_measured(ledger, int8(1), BASELINE_ACCURACY - 0.03, (ranking(*SPREAD),))
    excluded.add(variant_key(int8(1)))
    assert next_fallback(ledger, excluded) == int8(4)


def test_the_strategy_learns_the_rankings_the_coordinator_hands_it() -> None:
    """The coordinator hands the strategy the rankings its study holds (a resumed study's),
    so its ledger sizes even the first fallback step by them (as above)."""
    table = ranking(*SPREAD)
    strategy = AutotuneStrategy(fallback_space(), BOUNDED, 0)
    strategy.learn_sensitivity([table])
    assert list(strategy.ledger.sensitivity.values()) == [table]


def op_types_space() -> Any:
    static_only = {"precision.mode": ["int8_static"]}
    return space_of(
        "op_types",
        [
            ("runtime.engine", ["onnxruntime"], {}),
            ("batch.size", [1, 8], {}),
            ("precision.mode", ["fp32", "int8_static"], {}),
            ("precision.fallback", [0, 1, 2, 4, 8], static_only),
            ("precision.calibration", ["minmax", "percentile"], static_only),
            ("precision.op_types", ["all", "matmul_only"], static_only),
        ],
    )


def narrowed(calibration: str, fallback: int = 0) -> dict[str, ConfigValue]:
    return {**static(calibration, fallback), "precision.op_types": "matmul_only"}


def test_after_the_calibrations_convolutions_go_to_float_before_single_nodes() -> None:
    """The op-type-wise step comes from the most accurate calibration, and the node-wise
    fallback after it from the most accurate of the chain, ranked among the op types it
    quantizes: the Conv nodes that lead the ranking are in float already."""
    ledger = Ledger(op_types_space(), designed=[], request=BOUNDED)
    convs = [NodeSensitivity(node=f"conv{i}", rank=i, op_type="Conv", drop=0.05) for i in (1, 2)]
    matmuls = [
        NodeSensitivity(node=f"matmul{i}", rank=i, op_type="MatMul", drop=drop)
        for i, drop in ((3, 0.03), (4, 0.001), *((i, None) for i in range(5, 40)))
    ]
    table = SensitivityTable(
        model_sha256="a" * 64, mode="int8_static", seconds=1.0, nodes=[*convs, *matmuls]
    )
    ledger.learn_sensitivity([table])
    excluded: set[str] = set()
    accuracy_measured(ledger, op_types_space().baseline(), BASELINE_ACCURACY)
    breaks_the_bound(ledger, {**static("minmax"), "precision.op_types": "all"}, excluded, 0.5)
    assert ledger.next_proposal(lambda: [], excluded) == (
        {**static("percentile"), "precision.op_types": "all"},
        "calibration",
    )
    breaks_the_bound(ledger, {**static("percentile"), "precision.op_types": "all"}, excluded, 0.6)
    assert ledger.next_proposal(lambda: [], excluded) == (narrowed("percentile"), "op_types")
    # MatMul alone in int8 drops 0.031: its one sensitive MatMul in float meets 0.01.
    breaks_the_bound(ledger, narrowed("percentile"), excluded, BASELINE_ACCURACY - 0.031)
    assert ledger.next_proposal(lambda: [], excluded) == (narrowed("percentile", 1), "fallback")


def test_an_int8_variant_no_faster_than_float_gets_no_more_nodes_in_float() -> None:
    ledger = Ledger(fallback_space(), designed=[], request=BOUNDED)
    ledger.learn_sensitivity([ranking(*SPREAD)])
    accuracy_measured(ledger, fallback_space().baseline(), BASELINE_ACCURACY)
    spec = TrialSpec(study="s", trial_number=9, config=int8(0), workload=WORKLOAD)
    slow = table_metrics(int8(0)).model_copy(
        update={"accuracy": BASELINE_ACCURACY - 0.05, "latency_p95_ms": 10.0}
    )
    provenance = scripted_provenance(spec).model_copy(update={"model_sha256": "a" * 64})
    ledger.settle(9, spec, TrialResult.for_spec(spec, "ok", None, 0.0, slow, provenance))
    assert next_fallback(ledger, BROKEN) is None


def test_a_screened_variants_accuracy_sizes_the_next_fallback() -> None:
    ledger = broken_int8()
    excluded = set(BROKEN)
    spec = TrialSpec(study="s", trial_number=7, config=int8(1), workload=WORKLOAD)
    figures = table_metrics(int8(1)).model_copy(update={"accuracy": BASELINE_ACCURACY - 0.03})
    provenance = scripted_provenance(spec).model_copy(update={"model_sha256": "a" * 64})
    screened = TrialResult.for_spec(spec, "screened", "dominated", 0.0, None, provenance, figures)
    ledger.settle(7, spec, screened.model_copy(update={"sensitivity": [ranking(*SPREAD)]}))
    excluded.add(variant_key(int8(1)))
    assert next_fallback(ledger, excluded) == int8(4)  # as from a trial measured whole


def test_a_fallback_of_every_ranked_node_is_answered_without_building_it() -> None:
    strategy = AutotuneStrategy(fallback_space(), BOUNDED, 0)
    strategy.learn_sensitivity([ranking(0.04, 0.03, 0.01, unmeasured=0)])  # three nodes
    spec = TrialSpec(study="s", trial_number=3, config=int8(4), workload=WORKLOAD)
    answer = strategy.answer("s", spec, set())
    assert answer is not None and answer.result is not None
    assert answer.result.status == "skipped" and "holds 3 quantizable nodes" in str(
        answer.result.reason
    )
    within = TrialSpec(study="s", trial_number=4, config=int8(2), workload=WORKLOAD)
    assert strategy.answer("s", within, set()) is None


def test_a_torch_engine_falls_back_by_its_modules_ranking_not_the_onnx_one() -> None:
    space = space_of(
        "torch-and-onnx",
        [
            ("runtime.engine", ["onnxruntime", "torch_eager"], {}),
            ("batch.size", [1], {}),
            ("precision.mode", ["fp32", "int8_dynamic"], {}),
            ("precision.fallback", [0, 1, 2, 4, 8], {"precision.mode": ["int8_dynamic"]}),
        ],
    )
    onnx_nodes = ranking(*SPREAD, mode="int8_dynamic")  # predicts 4
    torch_modules = ranking(0.09, 0.0025, 0.0025, 0.0025, 0.0025, mode="int8_dynamic")
    torch_modules = torch_modules.model_copy(update={"ranked": "torch"})  # predicts 1
    for engine, expected in (("torch_eager", 1), ("onnxruntime", 4)):
        ledger = Ledger(space, designed=[], request=BOUNDED)
        ledger.learn_sensitivity([onnx_nodes, torch_modules])
        accuracy_measured(ledger, space.baseline(), BASELINE_ACCURACY)
        config = {**int8(0), "runtime.engine": engine, "precision.mode": "int8_dynamic"}
        accuracy_measured(ledger, config, BASELINE_ACCURACY - 0.05)
        assert next_fallback(ledger, {variant_key(config)}) == {
            **config,
            "precision.fallback": expected,
        }
