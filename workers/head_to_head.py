"""Head-to-head: several configurations of one workload measured in interleaved rounds.

Every entrant is built twice, for the first and for the second half of the rounds (the
second time in reverse order), so the rounds also see how much two builds of one
configuration differ. Each round times every entrant for one block (`round_seconds`, at least
`MIN_BLOCK_CALLS` calls, stretched to the energy meter's window), in an order that rotates
from round to round (A B C, B C A, C A B, ...), so neither a slow minute of the machine nor
the position in a round favours one of them; a short pause and a few untimed calls precede
each block, so one entrant's spinning thread pools do not slow the next. Each
round's blocks are watched together for other load (`workers.measuring.contention`); under
the 'wait' policy a round first waits for quiet only where it is the first of its half or the
round before it was contended (a quiet round is itself a look at the machine). The control
plane turns the per-round figures into paired ratios (`autotune.conclusion.decision`).

An entrant may run as `autotune.load` runs a tuned model (`Entrant.loaded_artifact`): exported,
loaded from its artifact and timed through `Predictor.predict`, beside the same configuration
as it is built for trials.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from autotune.core.contract import (
    Contention,
    Entrant,
    EntrantOutcome,
    HeadToHeadResult,
    HeadToHeadSpec,
    MeasurementSettings,
    RoundFigures,
    TrialSpec,
)
from autotune.core.knobs.config import TrialConfig
from workers.building.runtimes import Session, helper_pids, opened
from workers.cache import LoadedWorkload, WorkloadCache, default_cache
from workers.measuring.contention import ContentionProbe, gpu_watch_for
from workers.measuring.energy import EnergyMeter, EnergyReading, cpu_seconds_with, select_meter
from workers.measuring.evaluate import VariantQuality
from workers.measuring.figure_meter import FigureRequest, open_figure_meters
from workers.measuring.meters import Measurement, measure, summarize, warm_up
from workers.predictor import exported_and_loaded
from workers.runner import (
    check_concurrency,
    classify_failure,
    provenance_for,
    timing_batch,
    trial_metrics,
)

MIN_BLOCK_CALLS = 5
# Before each block: a pause in which the previous entrant's thread pools stop spinning, and
# a few untimed calls that bring this entrant's caches and threads back.
SETTLE_S = 0.05
BLOCK_WARMUP_CALLS = 3


@dataclass
class _Live:
    """An entrant whose session is open, and what its blocks measured so far."""

    entrant: Entrant
    config: TrialConfig
    call: Callable[[], object]
    helpers: list[int]
    rounds: list[RoundFigures] = field(default_factory=list)
    latencies_ms: list[np.ndarray] = field(default_factory=list)
    joules: float = 0.0
    window_samples: int = 0
    seconds: float = 0.0
    window_calls: int = 0
    idle_power_w: float | None = None
    meter: EnergyMeter | None = None
    # Each measured figure summed over the blocks, weighted by the block's window calls.
    figure_sums: dict[str, float] = field(default_factory=dict)

    def reopened(self, build: _Live) -> None:
        """Measure `build` (a new build of the same entrant) from now on."""
        self.call, self.helpers = build.call, build.helpers


def block_settings(settings: MeasurementSettings, round_seconds: float) -> MeasurementSettings:
    """One block of a round: `round_seconds` and at least MIN_BLOCK_CALLS calls, but never
    more than four times `round_seconds` (a slow model gets fewer calls, at least one)."""
    return settings.model_copy(
        update={
            "warmup_iters": 0,
            "min_iters": MIN_BLOCK_CALLS,
            "max_iters": max(settings.max_iters, MIN_BLOCK_CALLS),
            "min_seconds": round_seconds,
            "max_seconds": 4 * round_seconds,
            "settle_tolerance": None,
        }
    )


def run_head_to_head(spec: HeadToHeadSpec, store: WorkloadCache | None = None) -> HeadToHeadResult:
    """Measure the entrants in interleaved rounds. An entrant that cannot be built or run
    gets its failure as its outcome; the others go on."""
    started = time.perf_counter()
    store = store or default_cache()
    loaded = store.get(spec.workload)
    settings = spec.measurement
    live: dict[_Key, _Live] = {}
    failed: dict[_Key, EntrantOutcome] = {}
    contention: list[Contention] = []
    wait_left = settings.contention_max_wait_s if settings.contention == "wait" else 0.0
    block = block_settings(settings, spec.round_seconds)
    for build, rounds in enumerate(_halves(spec.rounds)):
        with ExitStack() as stack:
            order = spec.entrants if build == 0 else spec.entrants[::-1]
            _build_all(order, partial(_open, spec, store, loaded, stack), live, failed)
            entrants = [live[_key(e)] for e in spec.entrants if _key(e) in live]
            helpers = [pid for one in entrants for pid in one.helpers]
            probe = _probe(settings, entrants, helpers)
            quiet_just_now = False  # the build before a half's first round was not watched
            for index in rounds if entrants else ():
                waited = 0.0
                if wait_left > 0 and not quiet_just_now:
                    waited = probe.wait_for_quiet(wait_left)
                    wait_left = max(wait_left - waited, 0.0)
                probe.start()
                shift = index % len(entrants)
                for one in entrants[shift:] + entrants[:shift]:
                    _time_block(one, block, settings)
                threads = max(one.config.threads for one in entrants)
                contention.append(probe.stop(threads, waited))
                # A round that ended quiet is a longer look at the machine than waiting's
                # own: the next round starts at once.
                quiet_just_now = not contention[-1].contended
    # No memory sampler thread here: its wake-ups would land in the timed calls, and the
    # comparison holds every entrant at once, so its peak says nothing of one of them.
    resident_mb = _resident_mb()
    outcomes = [_outcome(one, resident_mb) for one in live.values() if one.rounds]
    by_key = {_key(o): o for o in [*outcomes, *failed.values()]}
    return HeadToHeadResult(
        entrants=[by_key[_key(e)] for e in spec.entrants],
        contention=contention,
        provenance=provenance_for(loaded, spec, None),
        duration_s=time.perf_counter() - started,
    )


def _halves(rounds: int) -> list[range]:
    """The rounds of each build: every entrant is built twice, once for each half, so the
    rounds see how much two builds of the same configuration differ."""
    middle = rounds // 2
    return [range(0, middle), range(middle, rounds)] if middle else [range(rounds)]


# An entrant's identity in the rounds: its trial, and whether it runs as loaded from its artifact.
_Key = tuple[int, bool]


def _key(entrant: Entrant | EntrantOutcome) -> _Key:
    return entrant.trial_number, entrant.loaded_artifact


def _build_all(
    entrants: list[Entrant],
    open_one: Callable[[Entrant], _Live],
    live: dict[_Key, _Live],
    failed: dict[_Key, EntrantOutcome],
) -> None:
    """A new build of every entrant that has not failed, into `live`; one that fails to build
    moves to `failed` with its reason."""
    for entrant in entrants:
        if _key(entrant) in failed:
            continue
        try:
            build = open_one(entrant)
        except Exception as error:
            status, reason = classify_failure(error)
            failed[_key(entrant)] = EntrantOutcome(
                trial_number=entrant.trial_number,
                loaded_artifact=entrant.loaded_artifact,
                status=status,
                reason=reason,
            )
            live.pop(_key(entrant), None)
            continue
        live.setdefault(_key(entrant), build).reopened(build)


def _open(
    spec: HeadToHeadSpec,
    store: WorkloadCache,
    loaded: LoadedWorkload,
    stack: ExitStack,
    entrant: Entrant,
) -> _Live:
    """The entrant's session, and its timed call: `session.run`, or for an entrant run as
    loaded from its artifact, `Predictor.predict` of the exported and reloaded model."""
    config = loaded.parse(entrant.config)
    check_concurrency(config)
    if entrant.loaded_artifact:
        exported = TrialSpec(
            study=spec.study,
            trial_number=entrant.trial_number,
            purpose="export",
            workload=spec.workload,
            config=entrant.config,
        )
        predictor = stack.enter_context(exported_and_loaded(exported, store))
        session: Session = predictor.session
        call = partial(predictor.predict, timing_batch(loaded, session, config))
    else:
        session = stack.enter_context(opened(loaded.session_for(config)))
        call = partial(session.run, timing_batch(loaded, session, config))
    warm_up(call, spec.measurement.warmup_iters, config.concurrency)
    return _Live(entrant, config, call, list(helper_pids(session)))


def _probe(settings: MeasurementSettings, live: list[_Live], helpers: list[int]) -> ContentionProbe:
    own_pids = {os.getpid(), *helpers}
    on_gpu = next((one.config for one in live if one.config.device == "cuda"), None)
    gpu = gpu_watch_for(on_gpu, lambda: own_pids) if on_gpu is not None else None
    return ContentionProbe(settings, cpu_seconds_with(helpers), gpu=gpu)


def _time_block(one: _Live, block: MeasurementSettings, settings: MeasurementSettings) -> None:
    time.sleep(SETTLE_S)
    warm_up(one.call, BLOCK_WARMUP_CALLS, one.config.concurrency)
    cpu_clock = cpu_seconds_with(one.helpers)
    meter = select_meter(one.config, settings, cpu_clock=cpu_clock)
    figure_meters = open_figure_meters(FigureRequest(one.config, settings, cpu_clock))
    try:
        measured = measure(one.call, block, meter, one.config.concurrency, figures=figure_meters)
    finally:
        meter.close()
    batch = one.config.batch_size
    latency, energy = measured.latency, measured.energy
    samples = batch * measured.window_calls
    one.rounds.append(
        RoundFigures(
            calls=latency.iterations,
            latency_p50_ms=latency.p50_ms,
            latency_p95_ms=latency.p95_ms,
            throughput_per_s=batch * latency.calls_per_s,
            energy_per_sample_j=energy.joules / samples,
            measured=measured.figures,
        )
    )
    for name, value in measured.figures.items():
        one.figure_sums[name] = one.figure_sums.get(name, 0.0) + value * measured.window_calls
    one.latencies_ms.append(latency.latencies_ms)
    one.joules += energy.joules
    one.seconds += energy.seconds
    one.window_calls += measured.window_calls
    one.idle_power_w = energy.idle_power_w
    one.meter = meter


def _outcome(one: _Live, peak_memory_mb: float) -> EntrantOutcome:
    """Every call of every round, summarised as one trial's metrics; a measured figure is the
    mean of the blocks' weighted by their calls (for a figure per sample: over every call)."""
    latencies_ms = np.concatenate(one.latencies_ms)
    latency = summarize((latencies_ms * 1e6).astype(np.int64), one.seconds)
    assert one.meter is not None  # every live entrant has timed at least one block
    energy = EnergyReading(one.joules, one.seconds, one.idle_power_w)
    figures = {name: total / one.window_calls for name, total in one.figure_sums.items()}
    measured = Measurement(latency, energy, one.window_calls, figures)
    quality = VariantQuality(one.entrant.known_accuracy, one.entrant.known_quality)
    metrics = trial_metrics(quality, measured, one.config.batch_size, peak_memory_mb, one.meter)
    return EntrantOutcome(
        trial_number=one.entrant.trial_number,
        loaded_artifact=one.entrant.loaded_artifact,
        status="ok",
        rounds=one.rounds,
        metrics=metrics,
    )


def _resident_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**20
