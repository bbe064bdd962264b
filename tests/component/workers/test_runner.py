"""run_trial over engines and precisions, failures as statuses, artifacts that reproduce."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from autotune.core.contract import (
    MAX_TRACEBACK_CHARS,
    ConfigValue,
    DataRef,
    MetricRef,
    ModelRef,
    Screen,
    ScreenObjective,
    TrialResult,
    Workload,
)
from autotune.core.errors import RequestError
from autotune.core.knobs import variant_key
from tests.workers_support import (
    FAST,
    digits_workload,
    export_digits_onnx,
    skip_unless_runnable_here,
    spec_for,
)
from workers import evaluate_artifact, export_artifact, run_trial
from workers.cache import LoadedWorkload, WorkloadCache
from workers.measuring.energy import EnergyReading
from workers.measuring.evaluate import VariantQuality, run_all
from workers.runner import is_device_fault, scan_batches, story

STORE = WorkloadCache(capacity=4)  # shared, so each variant is built and evaluated once


def run(
    config: dict[str, ConfigValue],
    workload: Workload | None = None,
    known_accuracy: float | None = None,
) -> TrialResult:
    return run_trial(spec_for(workload or digits_workload(), config, known_accuracy), STORE)


def ok(config: dict[str, ConfigValue], workload: Workload | None = None) -> TrialResult:
    result = run(config, workload)
    assert result.status == "ok", result.reason
    assert result.metrics is not None
    return result


@pytest.fixture(scope="module")
def fp32_accuracy() -> float:
    metrics = ok({}).metrics
    assert metrics is not None
    return metrics.accuracy


@pytest.fixture(scope="module")
def onnx_workload(digits_onnx: Path) -> Workload:
    return digits_workload(model=ModelRef(onnx=str(digits_onnx)))


CPU_CONFIGS = [
    {"runtime.engine": "torch_eager", "precision.mode": "fp32"},
    {"runtime.engine": "torch_eager", "precision.mode": "bf16"},
    {"runtime.engine": "torch_eager", "precision.mode": "int8_dynamic"},
    {"runtime.engine": "onnxruntime", "precision.mode": "fp32"},
    {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic"},
]


@pytest.mark.parametrize("config", CPU_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_every_cpu_engine_and_precision_measures(
    config: dict[str, ConfigValue], fp32_accuracy: float
) -> None:
    skip_unless_runnable_here(config)
    result = ok({**config, "batch.size": 4})
    metrics = result.metrics
    assert metrics is not None
    assert abs(metrics.accuracy - fp32_accuracy) <= 0.02
    assert 0 < metrics.latency_p50_ms <= metrics.latency_p90_ms <= metrics.latency_p95_ms
    assert metrics.latency_p95_ms <= metrics.latency_p99_ms
    assert FAST.min_iters <= metrics.iterations <= FAST.max_iters
    assert metrics.throughput_per_s == pytest.approx(4 * 1000 / metrics.latency_mean_ms)
    assert metrics.energy_source == "estimate" and metrics.energy_per_sample_j > 0
    assert metrics.peak_memory_mb > 50
    assert result.variant_key == variant_key({**config, "batch.size": 4})


def test_the_unmodified_model_is_accurate(fp32_accuracy: float) -> None:
    assert fp32_accuracy >= 0.95


def test_provenance(fp32_accuracy: float) -> None:
    from workers.inspection import inspect_workload

    result = ok({"batch.size": 2})
    assert result.provenance is not None
    assert result.provenance.model_sha256 == inspect_workload(digits_workload(), STORE).sha256
    assert {"python", "torch", "onnxruntime", "numpy"} <= set(result.provenance.software)
    assert result.provenance.measurement == FAST
    assert result.provenance.pid is not None and result.provenance.host
    assert (result.study, result.trial_number, result.attempt) == ("test", 0, 0)
    assert result.duration_s > 0


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({"precision.mode": "fp16"}, "needs CUDA"),
        ({"runtime.engine": "onnxruntime", "precision.mode": "bf16"}, "bf16 does not run on"),
        ({"runtime.engine": "onnxruntime", "precision.mode": "fp16"}, "CPUExecutionProvider"),
        ({"precision.mode": "int4"}, "precision.mode"),
        ({"prune.method": "magnitude", "prune.ratio": 0.99}, "prune.ratio"),
        ({"runtime.provider": "cuda"}, "runtime.provider"),
    ],
)
def test_unsupported_configurations(config: dict[str, ConfigValue], reason_part: str) -> None:
    result = run(config)
    assert result.status == "unsupported"
    assert result.metrics is None and result.reason and reason_part in result.reason


def test_torch_eager_on_an_onnx_model_is_unsupported(onnx_workload: Workload) -> None:
    result = run({"runtime.engine": "torch_eager"}, onnx_workload)
    assert result.status == "unsupported"


def test_unknown_groups_are_ignored() -> None:
    assert run({"future.devices": 4}).status == "ok"


def failing_workload(tmp_path: Path, make_module: Callable[[str], str], raised: str) -> Workload:
    name = make_module(
        f"""
        import torch

        class Broken(torch.nn.Module):
            def forward(self, x):
                raise {raised}

        def build():
            return Broken()
        """
    )
    return digits_workload(model=ModelRef(entry_point=f"{name}:build"), extra_path=[tmp_path])


def test_a_model_that_raises_is_an_error(tmp_path: Path, make_module: Callable[[str], str]) -> None:
    workload = failing_workload(tmp_path, make_module, "RuntimeError('kernel exploded')")
    result = run_trial(spec_for(workload, {}), WorkloadCache())
    assert result.status == "error"
    assert result.reason == "RuntimeError: kernel exploded"
    assert result.metrics is None and result.variant_key == variant_key({})
    assert result.traceback is not None and not result.device_fault
    assert result.traceback.startswith("Traceback (most recent call last):")
    assert "raise RuntimeError('kernel exploded')" in result.traceback


def test_a_cuda_error_is_a_device_fault_and_a_model_error_is_not() -> None:
    assert is_device_fault(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_device_fault(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_device_fault(ValueError("CUDA error: not from the device"))


def test_a_long_traceback_keeps_its_end() -> None:
    try:
        raise RuntimeError("many lines of a converter's log\n" * 2000 + "the last line")
    except RuntimeError as error:
        told = story(error)
    assert len(told) == MAX_TRACEBACK_CHARS
    assert told.endswith("the last line\n")


def test_running_out_of_memory_is_oom(tmp_path: Path, make_module: Callable[[str], str]) -> None:
    workload = failing_workload(tmp_path, make_module, "MemoryError('no room')")
    assert run_trial(spec_for(workload, {}), WorkloadCache()).status == "oom"


def test_torch_out_of_memory_is_oom(tmp_path: Path, make_module: Callable[[str], str]) -> None:
    workload = failing_workload(tmp_path, make_module, "torch.OutOfMemoryError('device full')")
    assert run_trial(spec_for(workload, {}), WorkloadCache()).status == "oom"


def test_a_bad_workload_is_an_error_not_an_exception(tmp_path: Path) -> None:
    workload = digits_workload(model=ModelRef(onnx=str(tmp_path / "absent.onnx")))
    result = run_trial(spec_for(workload, {}), WorkloadCache())
    assert result.status == "error" and "RequestError" in (result.reason or "")


def test_known_accuracy_skips_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_score(*args: object) -> float:
        raise AssertionError("evaluated although the accuracy was known")

    monkeypatch.setattr(LoadedWorkload, "score", must_not_score)
    result = run(
        {"batch.size": 3, "prune.method": "magnitude", "prune.ratio": 0.6}, known_accuracy=0.5
    )
    assert result.metrics is not None and result.metrics.accuracy == 0.5


def test_accuracy_is_evaluated_once_per_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    scored: list[int] = []
    real_judge = LoadedWorkload.judge

    def counting_judge(self: LoadedWorkload, session: object) -> VariantQuality:
        scored.append(1)
        return real_judge(self, session)  # type: ignore[arg-type]

    monkeypatch.setattr(LoadedWorkload, "judge", counting_judge)
    store = WorkloadCache()
    variant: dict[str, ConfigValue] = {"prune.method": "magnitude", "prune.ratio": 0.2}
    first = run_trial(spec_for(digits_workload(), {**variant, "batch.size": 1}), store)
    second = run_trial(
        spec_for(digits_workload(), {**variant, "batch.size": 16, "runtime.threads": 1}), store
    )
    assert len(scored) == 1
    assert first.metrics and second.metrics and first.metrics.accuracy == second.metrics.accuracy


@pytest.mark.parametrize("precision", ["fp32", "int8_dynamic"])
def test_an_onnx_model_runs_on_onnxruntime_with_pruning(
    onnx_workload: Workload, precision: str, fp32_accuracy: float
) -> None:
    config: dict[str, ConfigValue] = {
        "precision.mode": precision, "prune.method": "magnitude", "prune.ratio": 0.3,
    }  # fmt: skip
    metrics = ok(config, onnx_workload).metrics
    assert metrics is not None and abs(metrics.accuracy - fp32_accuracy) <= 0.02


def test_heavy_pruning_costs_accuracy(fp32_accuracy: float) -> None:
    metrics = ok({"prune.method": "magnitude", "prune.ratio": 0.95}).metrics
    assert metrics is not None and metrics.accuracy < fp32_accuracy - 0.05


def test_a_fixed_batch_onnx_model(
    tmp_path: Path, digits_module: object, onnx_workload: Workload
) -> None:
    path = export_digits_onnx(digits_module, tmp_path / "fixed.onnx", batch=4)
    fixed = digits_workload(model=ModelRef(onnx=str(path)))
    dynamic_accuracy = ok({}, onnx_workload).metrics.accuracy  # type: ignore[union-attr]
    metrics = ok({"batch.size": 4}, fixed).metrics
    assert metrics is not None and metrics.accuracy == dynamic_accuracy
    result = run({"batch.size": 8}, fixed)
    assert result.status == "unsupported" and "batches of 4" in (result.reason or "")


def test_fidelity_metric(fp32_accuracy: float) -> None:
    workload = digits_workload(metric=MetricRef(kind="fidelity"))
    assert ok({}, workload).metrics.accuracy == pytest.approx(1.0)  # type: ignore[union-attr]
    quantized = ok({"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic"}, workload)
    assert 0.99 < quantized.metrics.accuracy < 1.0  # type: ignore[union-attr]


def test_custom_metric(
    tmp_path: Path, make_module: Callable[[str], str], fp32_accuracy: float
) -> None:
    name = make_module(
        """
        import numpy as np

        def error_rate_complement(outputs, labels, reference_outputs):
            assert reference_outputs.shape == outputs.shape
            return 1.0 - float(np.mean(outputs.argmax(axis=1) != labels))
        """
    )
    metric = MetricRef(kind="custom", entry_point=f"{name}:error_rate_complement")
    workload = digits_workload(metric=metric, extra_path=[tmp_path])
    assert ok({}, workload).metrics.accuracy == pytest.approx(fp32_accuracy)  # type: ignore[union-attr]


ARTIFACT_CONFIGS = [
    {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic", "batch.size": 8},
    {"runtime.engine": "torch_eager", "precision.mode": "bf16", "prune.method": "magnitude",
     "prune.ratio": 0.5, "batch.size": 2},
]  # fmt: skip


@pytest.mark.parametrize("config", ARTIFACT_CONFIGS, ids=["onnxruntime-int8", "torch-bf16-pruned"])
def test_an_exported_artifact_reproduces_the_trial_accuracy(
    tmp_path: Path, config: dict[str, ConfigValue]
) -> None:
    skip_unless_runnable_here(config)
    trial = ok(config)
    artifact = export_artifact(spec_for(digits_workload(), config), str(tmp_path), STORE)
    assert Path(artifact.path).parent == tmp_path
    fresh = WorkloadCache()  # as a different worker process would
    accuracy = evaluate_artifact(artifact.path, digits_workload(), fresh)
    assert abs(accuracy - trial.metrics.accuracy) <= 1e-9  # type: ignore[union-attr]
    assert evaluate_artifact(str(tmp_path), digits_workload(), fresh) == accuracy


def test_the_onnx_artifact_is_the_file_the_trial_ran(tmp_path: Path) -> None:
    import hashlib

    config: dict[str, ConfigValue] = {
        "runtime.engine": "onnxruntime",
        "precision.mode": "int8_dynamic",
    }
    ok(config)
    artifact = export_artifact(spec_for(digits_workload(), config), str(tmp_path / "a"), STORE)
    ran = STORE.get(digits_workload()).onnx_by_variant
    assert artifact.format == "onnx" and Path(artifact.path).name == "model.onnx"
    assert Path(artifact.path).read_bytes() in ran.values()
    assert artifact.sha256 == hashlib.sha256(Path(artifact.path).read_bytes()).hexdigest()
    again = export_artifact(
        spec_for(digits_workload(), config), str(tmp_path / "b"), WorkloadCache()
    )
    assert again.sha256 == artifact.sha256, (
        "a worker that never ran the trial exports the same file"
    )


def test_the_torch_artifact_holds_pruned_fp32_weights_and_the_recipe(tmp_path: Path) -> None:
    config: dict[str, ConfigValue] = {
        "precision.mode": "int8_dynamic", "prune.method": "magnitude", "prune.ratio": 0.4,
    }  # fmt: skip
    artifact = export_artifact(spec_for(digits_workload(), config), str(tmp_path), STORE)
    assert artifact.format == "safetensors" and Path(artifact.path).name == "model.safetensors"
    weights = load_file(artifact.path)
    assert all(tensor.dtype == np.float32 for tensor in weights.values())
    kernels = np.concatenate([t.ravel() for n, t in weights.items() if n.endswith("weight")])
    assert np.count_nonzero(kernels == 0) == round(0.4 * kernels.size)
    recipe = json.loads((tmp_path / "variant.json").read_text())
    entry_point = "experiments.digits.model:build_model"
    model_sha256 = STORE.get(digits_workload()).model.sha256
    assert recipe == {
        "config": config,
        "model_entry_point": entry_point,
        "model_sha256": model_sha256,
    }
    assert evaluate_artifact(artifact.path, digits_workload(), STORE) == ok(config).metrics.accuracy  # type: ignore[union-attr]


def test_evaluating_a_missing_artifact(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as caught:
        evaluate_artifact(str(tmp_path / "nothing"), digits_workload(), STORE)
    assert caught.value.field == "artifact"


def test_npz_data_gives_the_same_accuracy(digits_npz: Path, fp32_accuracy: float) -> None:
    workload = digits_workload(data=DataRef(npz=str(digits_npz)))
    assert ok({}, workload).metrics.accuracy == fp32_accuracy  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# Measurement: statistics, energy, concurrency, provenance, the accuracy cache


def test_a_trial_reports_its_p95_interval_stop_reason_and_energy_source() -> None:
    metrics = ok({"runtime.engine": "onnxruntime", "batch.size": 2}).metrics
    assert metrics is not None
    assert metrics.latency_p95_ci_low_ms is not None and metrics.latency_p95_ci_high_ms is not None
    assert metrics.latency_p95_ci_low_ms <= metrics.latency_p95_ms <= metrics.latency_p95_ci_high_ms
    assert metrics.stopped_by in ("settled", "max_iters", "max_seconds")  # FAST settles at 2%
    # no readable energy counter on a CPU-only test machine without RAPL access
    if metrics.energy_source == "estimate":
        assert metrics.energy_above_idle_per_sample_j is None and metrics.idle_power_w is None


def test_without_a_settle_tolerance_a_trial_stops_at_the_minimums() -> None:
    spec = spec_for(digits_workload(), {"runtime.engine": "onnxruntime"})
    spec = spec.model_copy(
        update={"measurement": FAST.model_copy(update={"settle_tolerance": None})}
    )
    metrics = run_trial(spec, STORE).metrics
    assert metrics is not None
    assert metrics.stopped_by == "minimums" and metrics.iterations == FAST.min_iters


class WindowMeter:
    """A counter meter that asks for a window longer than the timed calls."""

    source = "rapl"
    model = None  # a counter, not an estimate
    min_window_s = 0.2
    joules = 3.0

    def start(self) -> None:
        pass

    def stop(self) -> EnergyReading:
        return EnergyReading(joules=self.joules, seconds=0.2, idle_power_w=5.0)

    def close(self) -> None:
        self.closed = True


def test_a_counter_meter_s_energy_is_per_sample_of_its_whole_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meter = WindowMeter()
    monkeypatch.setattr("workers.runner.select_meter", lambda *args: meter)
    spec = spec_for(digits_workload(), {"runtime.engine": "onnxruntime", "batch.size": 3})
    quick = FAST.model_copy(update={"settle_tolerance": None})  # 5 timed calls, then repeats
    metrics = run_trial(spec.model_copy(update={"measurement": quick}), STORE).metrics
    assert metrics is not None and meter.closed
    assert metrics.energy_source == "rapl" and metrics.idle_power_w == 5.0
    window_samples = meter.joules / metrics.energy_per_sample_j
    assert window_samples == pytest.approx(round(window_samples))
    assert window_samples > 3 * metrics.iterations  # the window repeated the timed calls
    assert metrics.energy_above_idle_per_sample_j == pytest.approx(
        (meter.joules - 5.0 * 0.2) / window_samples
    )


@pytest.mark.parametrize("engine", ["onnxruntime", "torch_eager"])
def test_concurrent_load_counts_every_thread_s_requests(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    import threading

    from workers.building.ort_session import OnnxRuntimeSession
    from workers.building.torch_sessions import TorchEagerSession

    session_class = OnnxRuntimeSession if engine == "onnxruntime" else TorchEagerSession
    callers: list[int] = []
    real_run = session_class.run

    def recording_run(self: object, batch: np.ndarray) -> np.ndarray:
        callers.append(threading.get_ident())
        return real_run(self, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(session_class, "run", recording_run)
    config: dict[str, ConfigValue] = {
        "runtime.engine": engine, "runtime.threads": 1, "load.concurrency": 3, "batch.size": 2,
    }  # fmt: skip
    metrics = ok(config).metrics
    assert metrics is not None
    workers = [ident for ident in callers if ident != threading.get_ident()]
    assert len(set(workers)) >= 3  # warm-up and timing threads
    assert FAST.min_iters <= metrics.iterations <= len(workers)
    assert metrics.throughput_per_s == pytest.approx(
        2 * metrics.iterations / metrics.measure_seconds
    )
    assert metrics.accuracy == ok({"runtime.engine": engine}).metrics.accuracy  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({"runtime.engine": "torch_compile"}, "not safe to call from several threads"),
        ({"shard.tensor_parallel": 2}, "sharded sessions"),
        ({"load.concurrency": 0}, "load.concurrency=0"),
        ({"load.threads": 2}, "unknown configuration key 'load.threads'"),
    ],
)
def test_concurrency_that_a_session_cannot_take_is_unsupported(
    config: dict[str, ConfigValue], reason_part: str
) -> None:
    result = run({"load.concurrency": 2, **config})
    assert result.status == "unsupported" and reason_part in (result.reason or "")


def test_the_hardware_fingerprint_is_probed_once_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import workers.building.probe
    from autotune.core.contract import HardwareProfile
    from workers.building import runtimes

    real_probe = workers.building.probe.probe
    probes: list[str] = []

    def counting_probe() -> HardwareProfile:
        profile = real_probe()
        probes.append(profile.fingerprint)
        return profile

    runtimes.machine_profile.cache_clear()
    monkeypatch.setattr(workers.building.probe, "probe", counting_probe)
    first, second = ok({"batch.size": 2}), ok({"batch.size": 5})
    assert probes and len(probes) == 1
    assert first.provenance and second.provenance
    assert first.provenance.hardware_fingerprint == second.provenance.hardware_fingerprint
    assert first.provenance.hardware_fingerprint == probes[0]


def test_a_trial_whose_calls_are_far_too_slow_ends_as_too_slow() -> None:
    spec = spec_for(digits_workload(), {"batch.size": 4})
    bound = spec.measurement.model_copy(update={"max_call_ms": 1e-6})  # no call is that fast
    result = run_trial(spec.model_copy(update={"measurement": bound}), STORE)
    assert (result.status, result.metrics) == ("too_slow", None)
    assert result.reason is not None and "measurement.max_call_ms" in result.reason
    assert result.slow_call_ms is not None and result.slow_call_ms > 1e-6


def test_the_baseline_reads_its_call_time_at_each_batch_size_of_its_scan() -> None:
    spec = spec_for(digits_workload(), {"batch.size": 1})
    scanned = run_trial(spec.model_copy(update={"batch_scan": [1, 16, 1024]}), STORE)
    assert scanned.status == "ok", scanned.reason
    times = scanned.call_ms_by_batch
    assert list(times) == [1, 16, 1024]
    assert times[1] < times[1024]
    assert run_trial(spec, STORE).call_ms_by_batch == {}


class SleepingSession:
    """A session whose call sleeps a millisecond a sample."""

    fixed_batch = None

    def run(self, batch: np.ndarray) -> np.ndarray:
        time.sleep(batch.shape[0] / 1000)
        return batch


def test_a_batch_scan_stops_at_the_first_batch_past_the_bound() -> None:
    """Calls of about 1, 16 and 256 ms: a 100 ms bound reads batch 256, then stops."""
    loaded = STORE.get(digits_workload())
    session = SleepingSession()
    scanned = scan_batches(loaded, session, [1, 16, 256, 1024], 100.0)
    assert list(scanned) == [1, 16, 256]
    assert scanned[256] >= 256
    assert list(scan_batches(loaded, session, [1, 16], None)) == [1, 16]


def screen_against(throughput_per_s: float) -> Screen:
    """A front of one point, as accurate as any model can be, at this throughput."""
    return Screen(
        objectives=[
            ScreenObjective(metric="accuracy", maximize=True, timed=False),
            ScreenObjective(metric="throughput_per_s", maximize=True, timed=True),
        ],
        front=[[1.0, throughput_per_s]],
        margin=0.2,
    )


FAST_SCREEN_S = 0.05


def test_a_trial_the_front_is_far_ahead_of_is_screened_after_a_short_window() -> None:
    spec = spec_for(digits_workload(), {"batch.size": 4})
    # up to half a second for the short window: eight calls however loaded the machine
    short = spec.measurement.model_copy(
        update={"screen_seconds": FAST_SCREEN_S, "max_seconds": 2.0}
    )
    spec = spec.model_copy(update={"measurement": short})
    result = run_trial(spec.model_copy(update={"screen": screen_against(1e12)}), STORE)
    assert (result.status, result.metrics) == ("screened", None)
    assert result.screening is not None
    # the short window: eight calls and its seconds at least, without waiting to settle
    assert result.screening.stopped_by in ("minimums", "max_iters")
    assert result.screening.iterations >= 8
    assert result.reason is not None and "throughput_per_s 1e+12" in result.reason


def test_a_trial_that_can_reach_the_front_is_timed_in_full() -> None:
    spec = spec_for(digits_workload(), {"batch.size": 4})
    result = run_trial(spec.model_copy(update={"screen": screen_against(1.0)}), STORE)
    assert result.status == "ok", result.reason
    assert result.screening is None


def test_a_trial_says_where_its_time_went() -> None:
    evaluated = ok({"batch.size": 3})
    assert evaluated.times is not None
    assert evaluated.times.build_s > 0 and evaluated.times.timing_s > 0
    phases = evaluated.times.build_s + evaluated.times.accuracy_s + evaluated.times.timing_s
    assert phases == pytest.approx(evaluated.duration_s, rel=0.05)
    known = run({"batch.size": 3}, known_accuracy=0.5)
    assert known.times is not None and known.times.accuracy_s == 0.0


HEAVILY_PRUNED = {"prune.method": "magnitude", "prune.ratio": 0.95}


def test_a_variant_a_subset_shows_below_the_floor_ends_infeasible(fp32_accuracy: float) -> None:
    """Heavy pruning costs far more than the 0.1 allowed: the first 64 of the 394 digits
    evaluated (of 450, 56 held out to calibrate on) show it, and nothing more is evaluated
    or timed."""
    spec = spec_for(digits_workload(), HEAVILY_PRUNED)
    floor = fp32_accuracy - 0.1
    result = run_trial(spec.model_copy(update={"accuracy_floor": floor}), STORE)
    assert (result.status, result.metrics) == ("infeasible", None)
    assert result.reason is not None
    assert "on the first 64 of 394 evaluation samples" in result.reason
    assert f"below {floor:.4f}" in result.reason
    assert result.times is not None and result.times.timing_s < 0.05


def test_a_variant_near_the_floor_is_evaluated_in_full(fp32_accuracy: float) -> None:
    """int8 loses little: the subset's interval reaches above the floor, so the whole data
    judges it."""
    config = {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic"}
    spec = spec_for(digits_workload(), config)
    result = run_trial(spec.model_copy(update={"accuracy_floor": fp32_accuracy - 0.01}), STORE)
    assert result.status == "ok", result.reason


def test_known_accuracy_wins_over_the_cached_accuracy(fp32_accuracy: float) -> None:
    config: dict[str, ConfigValue] = {"prune.method": "magnitude", "prune.ratio": 0.1}
    measured = ok(config).metrics.accuracy  # type: ignore[union-attr]
    told = run(config, known_accuracy=0.123).metrics
    assert told is not None and told.accuracy == 0.123
    again = ok({**config, "batch.size": 7}).metrics
    assert again is not None and again.accuracy == measured, "the told figure is not cached"


def test_top1_agreement_is_reported_beside_fidelity_for_class_scores() -> None:
    """The digits model's outputs are ten class scores a sample: judged by fidelity, a trial
    also says how often its top-1 class is the unmodified model's, and how it was judged."""
    workload = digits_workload(metric=MetricRef(kind="fidelity"))
    store = WorkloadCache()
    pruned = run_trial(
        spec_for(workload, {"batch.size": 8, "prune.method": "magnitude", "prune.ratio": 0.9}),
        store,
    ).metrics
    assert pruned is not None and pruned.top1_agreement is not None
    loaded = store.get(workload)
    session = loaded.session_for(loaded.parse({"prune.method": "magnitude", "prune.ratio": 0.9}))
    outputs = run_all(session, loaded.data.inputs)
    reference = loaded.reference_outputs()
    expected = float(np.mean(outputs.argmax(axis=1) == reference.argmax(axis=1)))
    assert pruned.top1_agreement == pytest.approx(expected) and expected < 1.0
    assert "'output' (10 values a sample): cosine" in (pruned.accuracy_judged_by or "")
    labels = run_trial(spec_for(digits_workload(), {"batch.size": 8}), store).metrics
    assert labels is not None and labels.top1_agreement is None  # accuracy is already top-1
    assert labels.accuracy_judged_by == "top-1 accuracy against the labels"
