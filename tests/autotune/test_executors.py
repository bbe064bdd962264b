"""Failure outcomes produced by real causes on a real Ray executor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autotune.contract import DataRef, MeasurementSettings, ModelRef, TrialSpec, Workload
from autotune.executors import RayExecutor
from tests.conftest import FAST_MEASUREMENT, REPO

DIGITS_DATA = DataRef(entry_point="experiments.digits.model:eval_data")


def workload(model_entry_point: str) -> Workload:
    return Workload(
        model=ModelRef(entry_point=model_entry_point),
        data=DIGITS_DATA,
        python_path=[str(REPO)],
    )


def spec(number: int, work: Workload, config: dict, timeout_s: float | None = None) -> TrialSpec:
    return TrialSpec(
        study="executor-test",
        trial_number=number,
        workload=work,
        config=config,
        measurement=MeasurementSettings(**FAST_MEASUREMENT),
        timeout_s=timeout_s,
    )


@pytest.fixture(scope="module")
def capped_executor() -> Iterator[RayExecutor]:
    executor = RayExecutor(workers=1, memory_limit_mb=256)
    yield executor
    executor.close()


@pytest.mark.slow
@pytest.mark.integration
def test_a_batch_past_the_memory_cap_is_oom_and_the_worker_recovers(
    capped_executor: RayExecutor,
) -> None:
    hog = workload("tests.autotune.misbehaving_models:memory_hog")
    capped_executor.submit(spec(0, hog, {"batch.size": 512}))  # 512 MiB inside the forward
    (result,) = capped_executor.wait()
    assert result.status == "oom", result.reason
    capped_executor.submit(spec(1, hog, {"batch.size": 2}))
    (result,) = capped_executor.wait()
    assert result.status == "ok", result.reason


@pytest.mark.slow
@pytest.mark.integration
def test_a_trial_past_its_timeout_is_stopped(capped_executor: RayExecutor) -> None:
    slow = workload("tests.autotune.misbehaving_models:sleeper")
    capped_executor.submit(spec(2, slow, {"batch.size": 1}, timeout_s=3.0))
    (result,) = capped_executor.wait()
    assert result.status == "timeout"
    assert "3 s" in (result.reason or "")
    digits = workload("experiments.digits.model:build_model")
    capped_executor.submit(spec(3, digits, {"batch.size": 1}, timeout_s=120.0))
    (result,) = capped_executor.wait()
    assert result.status == "ok", result.reason


@pytest.mark.slow
@pytest.mark.integration
def test_unsupported_and_error_outcomes(capped_executor: RayExecutor) -> None:
    digits = workload("experiments.digits.model:build_model")
    capped_executor.submit(
        spec(4, digits, {"runtime.engine": "onnxruntime", "precision.mode": "bf16"})
    )
    (result,) = capped_executor.wait()
    assert result.status == "unsupported" and "bf16" in (result.reason or "")
    broken = workload("tests.autotune.misbehaving_models:no_such_function")
    capped_executor.submit(spec(5, broken, {}))
    (result,) = capped_executor.wait()
    assert result.status == "error"
