"""Run one trial, export a configuration's optimized model, and re-evaluate an export."""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from autotune.core.artifacts import software_versions
from autotune.core.contract import (
    Contention,
    HeadToHeadSpec,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    TrialStatus,
    TrialTimes,
)
from autotune.core.contract.trials import SensitivityTable
from autotune.core.errors import (
    AccuracyBelowFloor,
    CallTooSlow,
    MeasurementContended,
    Unsupported,
)
from autotune.core.knobs import ENGINES
from autotune.core.knobs.config import TrialConfig
from autotune.core.stats import median_ci_relative_half_width
from autotune.core.tracebacks import story
from workers.building.failures import is_out_of_memory
from workers.building.runtimes import Session, helper_pids, machine_profile, opened
from workers.cache import LoadedWorkload, WorkloadCache, default_cache
from workers.measuring.contention import check_contention, probe_for, waited_for_quiet
from workers.measuring.energy import EnergyMeter, cpu_seconds_with, select_meter
from workers.measuring.evaluate import SUBSET_CONFIDENCE, VariantQuality, tile_batch
from workers.measuring.figure_meter import FigureMeters, FigureRequest, open_figure_meters
from workers.measuring.meters import Measurement, PeakMemorySampler, measure, slow_call_ns, warm_up

logger = logging.getLogger(__name__)


def run_trial(spec: TrialSpec, store: WorkloadCache | None = None) -> TrialResult:
    """Build the configuration's variant, judge its accuracy and measure it. Never raises for a
    failing candidate: the failure becomes the result's status and reason."""
    started = time.perf_counter()
    clock = PhaseClock()
    store = store or default_cache()
    sensitivity_used(spec, store)  # what exports or comparisons used before is not this trial's
    try:
        result = _measure(spec, store, clock)
    except Exception as error:
        status, reason = classify_failure(error)
        logger.info("trial %s of %s ended %s: %s", spec.trial_number, spec.study, status, reason)
        result = TrialResult.for_spec(spec, status, reason).model_copy(
            update={
                "traceback": story(error),
                "device_fault": is_device_fault(error),
                "slow_call_ms": error.call_ms if isinstance(error, CallTooSlow) else None,
            }
        )
    duration = time.perf_counter() - started
    return result.model_copy(
        update={
            "duration_s": duration,
            "times": clock.times(),
            "sensitivity": sensitivity_used(spec, store),
        }
    )


def sensitivity_used(spec: TrialSpec, store: WorkloadCache) -> list[SensitivityTable]:
    """The int8 sensitivity rankings the spec's workload was asked for since the last call."""
    loaded = store.loaded(spec.workload)
    return [] if loaded is None else loaded.take_sensitivity()


class PhaseClock:
    """Seconds spent in each phase of a trial: `enter(phase)` ends the one before."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._phase = "build_s"
        self._since = time.perf_counter()

    def enter(self, phase: str) -> None:
        now = time.perf_counter()
        self._seconds[self._phase] = self._seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def times(self) -> TrialTimes:
        self.enter(self._phase)
        return TrialTimes(**self._seconds)


def classify_failure(error: Exception) -> tuple[TrialStatus, str]:
    if isinstance(error, Unsupported):
        return "unsupported", str(error)
    if isinstance(error, MeasurementContended):
        return "contended", str(error)
    if isinstance(error, CallTooSlow):
        return "too_slow", str(error)
    if isinstance(error, AccuracyBelowFloor):
        return "infeasible", str(error)
    if is_out_of_memory(error):
        return "oom", f"{type(error).__name__}: {error}"
    return "error", f"{type(error).__name__}: {error}"


def is_device_fault(error: Exception) -> bool:
    """Whether the error came from the CUDA device itself (an illegal access, a launch
    failure): the context may be unusable, so the next trial must not measure in it."""
    torch = sys.modules.get("torch")
    accelerator_error = getattr(torch, "AcceleratorError", None) if torch is not None else None
    if accelerator_error is not None and isinstance(error, accelerator_error):
        return True
    return isinstance(error, RuntimeError) and str(error).startswith("CUDA error")


def _measure(spec: TrialSpec, store: WorkloadCache, clock: PhaseClock) -> TrialResult:
    """The trial's result: measured in full, or screened out by a short window first."""
    loaded = store.get(spec.workload)
    config = loaded.parse(spec.config)
    check_concurrency(config)
    settings = spec.measurement
    device_memory = CudaPeakMemory(config.device == "cuda")
    with (
        device_memory,
        PeakMemorySampler() as memory,
        opened(loaded.session_for(config)) as session,
    ):
        helpers = helper_pids(session)  # sharded sessions' worker processes count too
        memory.watch(helpers)
        call = partial(session.run, timing_batch(loaded, session, config))
        # The spec's figure wins over this process's cache: the coordinator's is authoritative.
        if spec.known_accuracy is not None:
            quality = VariantQuality(spec.known_accuracy, spec.known_quality)
        else:
            clock.enter("accuracy_s")
            check_subset_accuracy(loaded, session, spec.accuracy_floor)
            quality = loaded.quality(config, session)
        clock.enter("timing_s")
        warm_up(call, settings.warmup_iters, config.concurrency, slow_call_ns(settings))
        probe = probe_for(settings, config, helpers)
        waited = waited_for_quiet(probe, settings)
        cpu_clock = cpu_seconds_with(helpers)
        meter: EnergyMeter = select_meter(config, settings, memory.own_cpu_seconds, cpu_clock)
        figure_meters = open_figure_meters(
            FigureRequest(config, settings, cpu_clock, memory.own_cpu_seconds)
        )
        screened: Screened | None = None
        try:
            probe.start()
            screened = screen(call, spec, config, quality, meter, figure_meters, memory)
            if screened is None:
                measured = measure(call, settings, meter, config.concurrency, figures=figure_meters)
            contention = probe.stop(config.threads, waited)
        finally:
            meter.close()
        check_contention(contention, settings)
        # The scan's larger batches are not the trial's: its peaks are read before.
        peak_mb = memory.peak_mb
        device_memory.read()
        call_ms_by_batch = scan_batches(loaded, session, spec.batch_scan, settings.max_call_ms)
    provenance = provenance_for(loaded, spec, contention)
    if screened is not None:
        return TrialResult.for_spec(
            spec, "screened", screened.reason, provenance=provenance, screening=screened.figures
        )
    metrics = trial_metrics(quality, measured, config.batch_size, peak_mb, meter)
    if device_memory.peak_mb is not None:
        metrics = metrics.model_copy(update={"peak_device_memory_mb": device_memory.peak_mb})
    result = TrialResult.for_spec(spec, "ok", None, 0.0, metrics, provenance)
    return result.model_copy(update={"call_ms_by_batch": call_ms_by_batch})


def check_subset_accuracy(loaded: LoadedWorkload, session: Session, floor: float | None) -> None:
    """Raise `AccuracyBelowFloor` where the first evaluation samples put the variant's
    accuracy below `floor` even at the top of their interval."""
    if floor is None:
        return
    subset = loaded.subset_score(session)
    if subset is None or subset.upper >= floor:
        return
    raise AccuracyBelowFloor(
        f"accuracy {subset.score:.4f} on the first {subset.samples} of {subset.of} evaluation "
        f"samples (at most {subset.upper:.4f} over all of them, {SUBSET_CONFIDENCE:.0%} "
        f"confidence) is below {floor:.4f}, the baseline's less max_accuracy_drop"
    )


# A short window's calls at least: a few more than the six an interval of the median needs.
SCREEN_CALLS = 8


@dataclass(frozen=True)
class Screened:
    figures: TrialMetrics
    reason: str


def screen(
    call: Callable[[], object],
    spec: TrialSpec,
    config: TrialConfig,
    quality: VariantQuality,
    meter: EnergyMeter,
    figure_meters: FigureMeters,
    memory: PeakMemorySampler,
) -> Screened | None:
    """Time a short window (`SCREEN_CALLS` calls and `measurement.screen_seconds` at least, or
    the measurement's own `min_seconds` where that is shorter; a quarter of `max_seconds` at
    most) and judge it against the spec's `screen`: its figures
    when a front point dominates even their hopeful reading, else None (the trial is then
    timed in full). A window too short for an interval of its median judges nothing."""
    settings = spec.measurement
    if spec.screen is None or settings.screen_seconds is None:
        return None
    short = settings.model_copy(
        update={
            "min_iters": SCREEN_CALLS,
            "min_seconds": min(settings.screen_seconds, settings.min_seconds),
            "max_seconds": max(settings.screen_seconds, settings.max_seconds / 4),
            "settle_tolerance": None,
        }
    )
    measured = measure(call, short, meter, config.concurrency, figures=figure_meters)
    spread = median_ci_relative_half_width(measured.latency.latencies_ms)
    if not math.isfinite(spread):
        return None
    figures = trial_metrics(quality, measured, config.batch_size, memory.peak_mb, meter)
    point = spec.screen.dominating(figures, spread)
    if point is None:
        return None
    names = [objective.metric for objective in spec.screen.objectives]
    reason = (
        f"screened: {measured.latency.iterations} calls in {measured.latency.measure_seconds:.2f} "
        f"s give {_figures(names, [figures.figure(n) for n in names])}; the front's "
        f"{_figures(names, point)} is better even with {spec.screen.margin:.0%} and the "
        f"window's interval ({spread:.0%}) in its favour"
    )
    return Screened(figures, reason)


def _figures(names: list[str], values: list[float]) -> str:
    return ", ".join(f"{name} {value:.4g}" for name, value in zip(names, values, strict=True))


# Calls timed at each batch size of a scan, after one untimed call at the new shape.
SCAN_CALLS = 3


def scan_batches(
    loaded: LoadedWorkload, session: Session, batches: list[int], max_call_ms: float | None
) -> dict[int, float]:
    """The median call time (ms) at each batch size in order, until one passes `max_call_ms`
    or fails (out of memory, a fixed batch): how the session's call time grows with the
    batch, for the coordinator's time estimates."""
    call_ms: dict[int, float] = {}
    for batch in batches:
        if session.fixed_batch is not None and session.fixed_batch != batch:
            break
        call = partial(session.run, tile_batch(loaded.data.inputs, batch))
        try:
            call()
            times = []
            for _ in range(SCAN_CALLS):
                before = time.perf_counter_ns()
                call()
                times.append((time.perf_counter_ns() - before) / 1e6)
        except Exception:  # a batch the session cannot take ends the scan, not the trial
            logger.info("the batch scan stops at batch %d: a call failed", batch, exc_info=True)
            break
        call_ms[batch] = float(np.median(times))
        if max_call_ms is not None and call_ms[batch] > max_call_ms:
            break
    return call_ms


class CudaPeakMemory:
    """CUDA memory reserved at the peak of the block (or until `read`), from torch's allocator
    statistics."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.peak_mb: float | None = None

    def __enter__(self) -> CudaPeakMemory:
        if self.enabled:
            import torch

            # Without a device the session refuses the trial as unsupported; nothing to count.
            self.enabled = torch.cuda.is_available()
        if self.enabled:
            torch.cuda.reset_peak_memory_stats()
        return self

    def read(self) -> None:
        """The peak so far is the figure; later allocations are not counted."""
        if self.enabled and self.peak_mb is None:
            import torch

            self.peak_mb = torch.cuda.max_memory_reserved() / 2**20

    def __exit__(self, *exc: object) -> None:
        self.read()


def check_concurrency(config: TrialConfig) -> None:
    """`load.concurrency` > 1 calls one session from several threads: only sessions that are
    safe to call so (onnxruntime's; torch eager inference without CUDA graphs) take it."""
    n = config.concurrency
    if n == 1:
        return
    if config.tensor_parallel > 1 or config.data_parallel > 1:
        raise Unsupported(f"load.concurrency={n}: sharded sessions take one call at a time")
    if not ENGINES[config.engine].concurrent_calls:
        safe = ", ".join(name for name, engine in ENGINES.items() if engine.concurrent_calls)
        raise Unsupported(
            f"load.concurrency={n}: runtime.engine={config.engine} sessions are not safe to "
            f"call from several threads ({safe} are)"
        )
    if config.cuda_graphs:
        raise Unsupported(
            f"load.concurrency={n}: a CUDA graph replays through shared static buffers"
        )


def timing_batch(loaded: LoadedWorkload, session: Session, config: TrialConfig) -> np.ndarray:
    if session.fixed_batch is not None and session.fixed_batch != config.batch_size:
        raise Unsupported(
            f"batch.size={config.batch_size}: the model only takes batches of {session.fixed_batch}"
        )
    return tile_batch(loaded.data.inputs, config.batch_size)


def trial_metrics(
    quality: VariantQuality,
    measured: Measurement,
    batch_size: int,
    peak_memory_mb: float,
    meter: EnergyMeter,
) -> TrialMetrics:
    """Latency figures are per call (one batch); throughput and energy are per sample. Energy
    and the figure meters' figures are over the meters' window, which may hold more calls than
    were timed."""
    latency, energy = measured.latency, measured.energy
    window_samples = batch_size * measured.window_calls
    above_idle = energy.above_idle_joules
    return TrialMetrics(
        accuracy=quality.accuracy,
        **quality.figures,  # type: ignore[arg-type]
        latency_p50_ms=latency.p50_ms,
        latency_p90_ms=latency.p90_ms,
        latency_p95_ms=latency.p95_ms,
        latency_p99_ms=latency.p99_ms,
        latency_mean_ms=latency.mean_ms,
        latency_cv=latency.cv,
        latency_p95_ci_low_ms=latency.p95_ci_low_ms,
        latency_p95_ci_high_ms=latency.p95_ci_high_ms,
        throughput_per_s=batch_size * latency.calls_per_s,
        latency_per_sample_ms=1000.0 / (batch_size * latency.calls_per_s),
        energy_per_sample_j=energy.joules / window_samples,
        energy_source=meter.source,
        energy_model=meter.model,
        energy_above_idle_per_sample_j=None if above_idle is None else above_idle / window_samples,
        idle_power_w=energy.idle_power_w,
        peak_memory_mb=peak_memory_mb,
        iterations=latency.iterations,
        measure_seconds=latency.measure_seconds,
        stopped_by=latency.stopped_by,
        measured=measured.figures,
    )


def provenance_for(
    loaded: LoadedWorkload, spec: TrialSpec | HeadToHeadSpec, contention: Contention | None
) -> Provenance:
    return Provenance(
        model_sha256=loaded.model.sha256,
        host=socket.gethostname(),
        pid=os.getpid(),
        hardware_fingerprint=machine_profile().fingerprint,
        software=software_versions(),
        measurement=spec.measurement,
        contention=contention,
    )
