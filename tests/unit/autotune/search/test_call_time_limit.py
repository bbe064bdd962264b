"""Estimates of a call's time come from the configuration's own calls, or the baseline's scan
where the configuration runs the baseline's engine and model variant: never another engine's."""

from __future__ import annotations

from autotune.search.state import CallTimeLimit

BASELINE = {"runtime.engine": "torch_eager", "runtime.threads": 1, "precision.mode": "fp32"}
SCAN = {1: 0.05, 8: 0.26, 64: 1.39}


def at(batch: int, **changes: object) -> dict[str, object]:
    return {
        **BASELINE,
        "batch.size": batch,
        **{k.replace("__", "."): v for k, v in changes.items()},
    }


def limit(max_call_ms: float) -> CallTimeLimit:
    calls = CallTimeLimit(max_call_ms=max_call_ms)
    calls.scanned(at(1), SCAN)
    return calls


def test_the_baseline_scan_bounds_only_configurations_of_its_engine_and_variant() -> None:
    calls = limit(1.0)
    reason = calls.blocks(at(64, runtime__threads=2))
    assert reason is not None and "the baseline's call time at that batch size" in reason
    assert calls.blocks(at(64, runtime__engine="onnxruntime")) is None
    assert calls.blocks(at(64, precision__mode="int8_static")) is None


def test_a_measured_configuration_is_bounded_by_its_own_calls() -> None:
    """ONNX Runtime took 0.3 ms at batch 8: at 64 about 0.3 x 1.39 / 0.26 = 1.6 ms."""
    calls = limit(1.0)
    calls.measured(at(8, runtime__engine="onnxruntime"), 0.3)
    reason = calls.blocks(at(64, runtime__engine="onnxruntime"))
    assert reason is not None and "this configuration's call at batch.size 8" in reason
    assert "about 2 ms" in reason


def test_a_too_slow_call_bounds_the_smaller_batches_of_its_configuration() -> None:
    """int8 at 64 stopped on a 2000 ms call: at 8 about 2000 x 0.26 / 1.39 = 374 ms, past
    100 ms; at 1 about 72 ms, within it."""
    calls = limit(100.0)
    calls.too_slow(at(64, precision__mode="int8_static"), 2000.0)
    assert calls.blocks(at(64, precision__mode="int8_static")) is not None
    reason = calls.blocks(at(8, precision__mode="int8_static"))
    assert reason is not None and "about 374 ms" in reason
    assert calls.blocks(at(1, precision__mode="int8_static")) is None
