from autotune.contract import MeasurementSettings
from autotune.metrics import OBJECTIVES
from autotune.pareto import Candidate
from autotune.validation import (
    nearest_neighbours,
    order_changed,
    p95_interval,
    scaled_settings,
    tied_with,
    with_metrics,
)

OBJ = [OBJECTIVES["accuracy"], OBJECTIVES["latency"]]


def cand(n: int, p95: float, accuracy: float = 0.9, ci: tuple[float, float] | None = None):
    metrics = {"accuracy": accuracy, "latency_p95_ms": p95}
    if ci is not None:
        metrics.update(latency_p95_ci_low_ms=ci[0], latency_p95_ci_high_ms=ci[1])
    return Candidate(trial_number=n, config={}, metrics=metrics, feasible=True)


def test_scaled_settings_measure_longer() -> None:
    base = MeasurementSettings(min_iters=10, max_iters=100, min_seconds=0.5, max_seconds=2.0)
    scaled = scaled_settings(base, 5)
    assert (scaled.min_iters, scaled.max_iters) == (50, 500)
    assert (scaled.min_seconds, scaled.max_seconds) == (2.5, 10.0)
    assert scaled.warmup_iters == base.warmup_iters


def test_nearest_neighbours_in_normalized_space() -> None:
    chosen = cand(0, p95=1.0, accuracy=0.90)
    near = cand(1, p95=1.1, accuracy=0.91)
    far = cand(2, p95=9.0, accuracy=0.99)
    middle = cand(3, p95=4.0, accuracy=0.95)
    front = [chosen, near, far, middle]
    assert [c.trial_number for c in nearest_neighbours(chosen, front, OBJ, 2)] == [1, 3]
    assert nearest_neighbours(chosen, front, OBJ, 0) == []


def test_overlapping_intervals_are_ties() -> None:
    chosen = cand(0, 1.0, ci=(0.9, 1.1))
    overlapping = cand(1, 1.15, ci=(1.05, 1.3))
    apart = cand(2, 2.0, ci=(1.8, 2.2))
    assert [c.trial_number for c in tied_with(chosen, [overlapping, apart])] == [1]


def test_without_intervals_only_equal_points_tie() -> None:
    assert p95_interval({"latency_p95_ms": 2.0}) == (2.0, 2.0)
    assert tied_with(cand(0, 1.0), [cand(1, 1.0), cand(2, 1.01)]) == [cand(1, 1.0)]


def test_order_changed_and_infeasible_rescoring() -> None:
    before = [cand(0, 1.0), cand(1, 1.2)]
    after = [cand(0, 1.3), cand(1, 1.2)]
    assert order_changed(before, after, OBJECTIVES["latency"])
    assert not order_changed(before, before, OBJECTIVES["latency"])
    rescored = with_metrics(before[0], {"latency_p95_ms": 3.0}, {"max_latency_p95_ms": 1.0})
    assert not rescored.feasible and rescored.metrics["latency_p95_ms"] == 3.0


def test_an_oom_batch_skips_larger_batches_of_the_same_variant() -> None:
    from autotune.coordinator import _exceeds_oom_batch, _record_oom

    smallest: dict[str, int] = {}
    int8 = {"precision.mode": "int8_dynamic", "batch.size": 64}
    _record_oom(smallest, int8)
    _record_oom(smallest, {**int8, "batch.size": 128})
    assert _exceeds_oom_batch({**int8, "batch.size": 64}, smallest) is not None
    assert _exceeds_oom_batch({**int8, "batch.size": 256}, smallest) is not None
    assert _exceeds_oom_batch({**int8, "batch.size": 32}, smallest) is None
    fp32 = {"precision.mode": "fp32", "batch.size": 256}
    assert _exceeds_oom_batch(fp32, smallest) is None


def test_derived_figures() -> None:
    from autotune.request import Cost
    from autotune.tuned import derived_figures

    metrics = {"energy_per_sample_j": 0.002, "throughput_per_s": 1000.0}
    assert derived_figures(metrics, Cost()) == {"energy_per_1000_samples_j": 2.0}
    priced = derived_figures(metrics, Cost(price_per_hour=3.6, grid_gco2_per_kwh=400.0))
    # a million samples take 1000 s = 1/3.6 h; 2000 J = 1/1800 kWh
    assert priced["cost_per_million_samples"] == 1.0
    assert abs(priced["co2e_g_per_million_samples"] - 400 / 1800) < 1e-12


def test_accuracy_is_reused_only_from_comparable_measurements() -> None:
    import optuna

    from autotune.coordinator import _accuracy_by_variant

    study = optuna.create_study(directions=["maximize"])
    same = {"model_sha256": "m", "software": {"torch": "2.13"}, "hardware_fingerprint": "h"}
    other = {**same, "software": {"torch": "2.14"}}
    for attrs in (
        {"baseline": True, "variant_key": "fp32", "provenance": same},
        {"variant_key": "int8", "provenance": same},
        {"variant_key": "bf16", "provenance": other},
    ):
        trial = study.ask()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("config", {})
        trial.set_user_attr("metrics", {"accuracy": 0.9})
        study.tell(trial, [0.9])
    assert _accuracy_by_variant(study) == {"fp32": 0.9, "int8": 0.9}
