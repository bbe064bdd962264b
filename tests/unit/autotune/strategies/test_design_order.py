"""The order of autotune's designed set: a thread probe right after the baseline, the
baseline's precision on each engine, then engine by engine as the front ranks them, a front
leader's precision at its batch-size sibling and on the other engines, the pairs the knobs
declare refused last; a per-sample selection's climb tries other thread counts."""

from __future__ import annotations

from typing import Any

from autotune.core.contract import ConfigValue, TrialResult, TrialSpec
from autotune.space.search_space import EffectiveSpace
from autotune.strategies.autotune import Ledger, designed_configs
from tests.coordinator_support import WORKLOAD, space_of, table_metrics
from tests.strategy_support import request

# The default objectives (accuracy, latency, energy) and selection (lowest latency).
DEFAULT = request()
THROUGHPUT = request(selection={"strategy": "highest_throughput"})


def engines_space() -> EffectiveSpace:
    """Two engines, two thread counts (the baseline's 2), three batch sizes, three
    precisions: bf16 does not run on onnxruntime, int8_static not on torch_eager."""
    return space_of(
        "engines",
        [
            ("runtime.engine", ["torch_eager", "onnxruntime"], {}),
            ("runtime.threads", [2, 1], {}),
            ("batch.size", [1, 8, 64], {}),
            ("precision.mode", ["fp32", "bf16", "int8_static"], {}),
        ],
    )


def cfg(engine: str, threads: int, batch: int, precision: str = "fp32") -> dict[str, ConfigValue]:
    return {
        "runtime.engine": engine,
        "runtime.threads": threads,
        "batch.size": batch,
        "precision.mode": precision,
    }


EAGER, ORT = "torch_eager", "onnxruntime"
BASELINE = cfg(EAGER, 2, 1)


def ledger_for(req: Any = DEFAULT) -> Ledger:
    space = engines_space()
    return Ledger(space, designed_configs(space, req), req)


def settled(ledger: Ledger, config: dict[str, ConfigValue], ms: float, joules: float) -> None:
    """`config` measured at `ms` per call and `joules` per sample."""
    spec = TrialSpec(study="s", trial_number=len(ledger.finished), config=config, workload=WORKLOAD)
    figures = {f"latency_{p}_ms": ms for p in ("p50", "p90", "p95", "p99", "mean")}
    metrics = table_metrics(config).model_copy(
        update={
            **figures,
            "energy_per_sample_j": joules,
            "throughput_per_s": 1000.0 * int(config["batch.size"]) / ms,
        }
    )
    ledger.settle(spec.trial_number, spec, TrialResult.for_spec(spec, "ok", None, 0.0, metrics))


def proposal(ledger: Ledger, front: list[dict[str, ConfigValue]]) -> Any:
    return ledger.next_proposal(lambda: front, set())


def test_the_baseline_at_the_other_thread_count_comes_right_after_it() -> None:
    ledger = ledger_for()
    settled(ledger, BASELINE, 10.0, 1.0)
    assert proposal(ledger, [BASELINE]) == (cfg(EAGER, 1, 1), "threads probe")


def test_a_probe_that_dominates_the_baseline_moves_the_design_to_its_thread_count() -> None:
    ledger = ledger_for()
    settled(ledger, BASELINE, 10.0, 1.0)
    settled(ledger, cfg(EAGER, 1, 1), 8.0, 0.5)
    assert proposal(ledger, [cfg(EAGER, 1, 1)]) == (cfg(EAGER, 1, 8), "designed")


def test_a_probe_that_trades_one_objective_for_another_leaves_the_baseline_threads() -> None:
    ledger = ledger_for()
    settled(ledger, BASELINE, 10.0, 1.0)
    settled(ledger, cfg(EAGER, 1, 1), 12.0, 0.5)  # cheaper but slower
    assert proposal(ledger, [BASELINE]) == (cfg(EAGER, 2, 8), "designed")


def measured_baseline_precision(ledger: Ledger) -> None:
    """The baseline, a probe that did not pay and fp32 on each engine at the middle batch."""
    settled(ledger, BASELINE, 10.0, 1.0)
    settled(ledger, cfg(EAGER, 1, 1), 12.0, 0.5)
    settled(ledger, cfg(EAGER, 2, 8), 20.0, 0.3)
    settled(ledger, cfg(ORT, 2, 8), 5.0, 0.1)


def test_the_engine_that_leads_the_front_has_its_precisions_measured_first() -> None:
    ledger = ledger_for()
    measured_baseline_precision(ledger)
    front = [cfg(ORT, 2, 8), BASELINE]
    # bf16 does not run on onnxruntime: its int8_static first, eager's bf16 after it
    assert proposal(ledger, front) == (cfg(ORT, 2, 8, "int8_static"), "designed")
    settled(ledger, cfg(ORT, 2, 8, "int8_static"), 9.0, 0.2)
    assert proposal(ledger, front) == (cfg(EAGER, 2, 8, "bf16"), "designed")


def test_pairs_the_knobs_declare_refused_come_after_every_other_designed_point() -> None:
    ledger = ledger_for()
    measured_baseline_precision(ledger)
    front = [cfg(ORT, 2, 8), BASELINE]
    proposed = []
    while (next_one := proposal(ledger, front)) is not None and next_one[1] == "designed":
        proposed.append(next_one[0])
        settled(ledger, next_one[0], 30.0, 2.0)  # dominated: the front stays as it is
    refused = {str(cfg(EAGER, 2, 8, "int8_static")), str(cfg(ORT, 2, 8, "bf16"))}
    assert set(map(str, proposed[-2:])) == refused
    assert not refused & set(map(str, proposed[:-2]))


def test_a_front_leader_in_another_precision_is_measured_next_on_the_selections_side() -> None:
    ledger = ledger_for()
    measured_baseline_precision(ledger)
    settled(ledger, cfg(ORT, 2, 8, "int8_static"), 2.0, 0.05)
    front = [cfg(ORT, 2, 8, "int8_static"), cfg(ORT, 2, 8), BASELINE]
    # lowest latency: one step toward batch 1 before the larger batch
    assert proposal(ledger, front) == (cfg(ORT, 2, 1, "int8_static"), "batch sibling")


def test_each_engine_meets_batch_one_in_the_precision_it_ran_fastest() -> None:
    ledger = ledger_for()
    measured_baseline_precision(ledger)
    settled(ledger, cfg(ORT, 2, 8, "int8_static"), 2.0, 0.05)
    settled(ledger, cfg(ORT, 2, 1, "int8_static"), 1.0, 0.2)
    settled(ledger, cfg(ORT, 2, 64, "int8_static"), 50.0, 0.01)
    settled(ledger, cfg(EAGER, 2, 8, "bf16"), 30.0, 2.0)
    front = [cfg(ORT, 2, 8), BASELINE]
    # only the refused pairs are left: onnxruntime's batch-1 point was measured in int8_static,
    # its fastest, and batch 1 of torch_eager is the baseline
    left = []
    while (next_one := proposal(ledger, front)) is not None and next_one[1] == "designed":
        left.append(str(next_one[0]))
        settled(ledger, next_one[0], 30.0, 2.0)
    assert set(left) == {str(cfg(EAGER, 2, 8, "int8_static")), str(cfg(ORT, 2, 8, "bf16"))}


def test_a_per_sample_selections_best_tries_other_threads_once_its_batch_climb_stops() -> None:
    ledger = ledger_for(THROUGHPUT)
    measured_baseline_precision(ledger)
    best = cfg(ORT, 2, 64, "int8_static")
    settled(ledger, cfg(ORT, 2, 8, "int8_static"), 2.0, 0.05)
    settled(ledger, best, 4.0, 0.01)  # at the largest batch
    assert proposal(ledger, [best]) == (cfg(ORT, 1, 64, "int8_static"), "climb")
