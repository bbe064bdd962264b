"""Failure outcomes produced by real causes on a real Ray executor, and in process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from autotune.core.contract import (
    DataRef,
    Entrant,
    HeadToHeadSpec,
    MeasurementSettings,
    ModelRef,
    TrialSpec,
    Workload,
)
from autotune.core.errors import AutotuneError
from autotune.execution.base import trial_memory_limit_mb
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_executor import RayExecutor
from autotune.tuning import TuneOptions, run_tune
from tests.conftest import FAST_MEASUREMENT, REPO, stored_trials
from tests.dying_workers import dying_worker

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


@pytest.mark.slow
@pytest.mark.integration
def test_a_sharded_trial_runs_as_a_gang_on_the_gpus_of_several_slots() -> None:
    """Two slots with one (logical) GPU each: a 2-way trial borrows both, runs in a placement
    group on one actor holding both GPUs, and the slots come back afterwards. Without a
    real GPU the trial itself ends as unsupported, which is all it can do here."""
    import ray

    assert not ray.is_initialized(), "runs before the module's shared executor starts Ray"
    executor = RayExecutor(workers=2, num_gpus=2)
    try:
        before = {p["pid"] for p in executor.pings()}
        digits = workload("experiments.digits.model:build_model")
        executor.submit(spec(7, digits, {"runtime.device": "cuda", "shard.data_parallel": 2}))
        assert executor.pending() == 1
        (result,) = executor.wait()
        assert result.status == "unsupported", result.reason
        after = {p["pid"] for p in executor.pings()}
        assert len(after) == 2 and not before & after  # both slots have fresh actors
        executor.submit(spec(8, digits, {"shard.data_parallel": 4}))
        (result,) = executor.wait()
        assert result.status == "unsupported" and "has 2" in (result.reason or "")
    finally:
        executor.close()


@pytest.mark.slow
@pytest.mark.integration
def test_a_worker_killed_while_starting_is_replaced_and_the_study_goes_on(
    write_request: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers killed on their first call, as the OOM killer kills one that is starting up:
    the model's inspection (before the study) is asked of a fresh worker instead of failing
    the tuning, and the baseline trial, lost with its worker, runs again as attempt 1."""
    import ray

    from autotune import tuning
    from autotune.execution import ray_executor

    assert not ray.is_initialized(), "runs before the module's shared executor starts Ray"
    armed = tmp_path / "armed"
    armed.mkdir()
    (armed / "inspect").touch()
    (armed / "run").touch()
    path = write_request(budget={"trials": 3})
    monkeypatch.setattr(ray_executor, "_worker_class", lambda: dying_worker(armed))
    executor = RayExecutor(workers=1)
    monkeypatch.setattr(tuning, "make_executors", lambda *args, **kwargs: [executor])

    outcome, _ = run_tune(path, TuneOptions(seed=0))

    assert not list(armed.iterdir()), "both armed calls killed a worker"
    assert outcome.tuned is not None and outcome.n_trials == 3
    stored = stored_trials(f"sqlite:///{tmp_path / 'study.db'}", "digits-test")
    trials = {t.number: t for t in stored}
    # Each trial ended with its own outcome (a short window may screen one out: pruned); none
    # is left failed or running by the killed workers.
    assert {t.state for t in trials.values()} <= {"complete", "pruned"}
    assert trials[0].state == "complete"
    assert trials[0].marks.baseline and trials[0].attempt == 1
    assert all(trials[n].attempt == 0 for n in trials if n != 0)


def assert_oom_then_recovers(executor: InProcessExecutor | RayExecutor) -> None:
    """A batch past the executor's 256 MiB cap ends `oom`; a small one then runs."""
    hog = workload("tests.misbehaving_models:memory_hog")
    executor.submit(spec(0, hog, {"batch.size": 512}))  # 512 MiB inside the forward
    (result,) = executor.wait()
    assert result.status == "oom", result.reason
    executor.submit(spec(1, hog, {"batch.size": 2}))
    (result,) = executor.wait()
    assert result.status == "ok", result.reason


def test_an_in_process_batch_past_the_memory_cap_is_oom_and_the_tuning_survives() -> None:
    """In-process, a trial that would take the tuning's own process down ends as `oom`."""
    executor = InProcessExecutor(memory_limit_mb=256)
    assert_oom_then_recovers(executor)
    executor.close()


def test_the_in_process_executor_caps_trials_at_a_share_of_the_memory_available() -> None:
    limit = trial_memory_limit_mb(1)
    assert limit is not None and 0 < limit <= psutil.virtual_memory().available / 2**20
    assert trial_memory_limit_mb(4) == pytest.approx(limit / 4, abs=2)
    assert InProcessExecutor()._worker.memory_limit_mb == pytest.approx(limit, rel=0.1)


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
    assert_oom_then_recovers(capped_executor)


@pytest.mark.slow
@pytest.mark.integration
def test_a_trial_past_its_timeout_is_stopped(capped_executor: RayExecutor) -> None:
    slow = workload("tests.misbehaving_models:sleeper")
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
    broken = workload("tests.misbehaving_models:no_such_function")
    capped_executor.submit(spec(5, broken, {}))
    (result,) = capped_executor.wait()
    assert result.status == "error"


@pytest.mark.slow
@pytest.mark.integration
def test_model_and_data_files_travel_through_the_object_store(
    capped_executor: RayExecutor, tmp_path: Path
) -> None:
    """Once shipped, a trial runs even where the original files no longer exist."""
    import numpy as np
    import torch

    from experiments.digits.model import build_model, eval_data
    from workers.loading.blobs import BLOB_DIR

    onnx_path, npz_path = tmp_path / "digits.onnx", tmp_path / "digits.npz"
    torch.onnx.export(build_model(), (torch.zeros(1, 1, 8, 8),), str(onnx_path), dynamo=False)
    inputs, labels = eval_data()
    np.savez(npz_path, inputs=inputs, labels=labels)
    files = Workload(
        model=ModelRef(onnx=str(onnx_path)), data=DataRef(npz=str(npz_path)), python_path=[]
    )
    info = capped_executor.inspect(files).model
    onnx_path.unlink()
    npz_path.unlink()
    capped_executor.submit(spec(6, files, {"batch.size": 1}))  # exported with a fixed batch
    (result,) = capped_executor.wait()
    assert result.status == "ok", result.reason
    assert result.provenance is not None and result.provenance.model_sha256 == info.sha256
    assert (BLOB_DIR / info.sha256 / "digits.onnx").is_file()


def head_to_head(work: Workload, timeout_s: float | None = None) -> HeadToHeadSpec:
    return HeadToHeadSpec(
        study="executor-test",
        workload=work,
        entrants=[
            Entrant(trial_number=0, config={"batch.size": 1}, known_accuracy=0.9),
            Entrant(trial_number=1, config={"batch.size": 8}, known_accuracy=0.9),
        ],
        rounds=6,
        round_seconds=0.05,
        measurement=MeasurementSettings(**FAST_MEASUREMENT),
        timeout_s=timeout_s,
    )


@pytest.mark.slow
@pytest.mark.integration
def test_a_head_to_head_runs_on_a_worker_and_one_past_its_timeout_is_stopped(
    capped_executor: RayExecutor,
) -> None:
    digits = workload("experiments.digits.model:build_model")
    result = capped_executor.compare(head_to_head(digits, timeout_s=120.0))
    assert [e.status for e in result.entrants] == ["ok", "ok"]
    assert all(len(e.rounds) == 6 for e in result.entrants) and len(result.contention) == 6
    slow = workload("tests.misbehaving_models:sleeper")
    with pytest.raises(AutotuneError, match="ran past 3 s"):
        capped_executor.compare(head_to_head(slow, timeout_s=3.0))
    again = capped_executor.compare(head_to_head(digits, timeout_s=120.0))  # a fresh worker
    assert [e.status for e in again.entrants] == ["ok", "ok"]
