"""How the batch size moves a request's objectives, and so where autotune's strategy runs it.

- Each metric declares how a larger batch moves it (`Metric.lean`): latency per call (the
  p95 of one batch) rises or stays, so it favours the small end of the range; latency per
  sample, throughput, energy and cost per sample improve, so they favour the large end;
  accuracy depends on the model variant alone.
- Where some objective gets worse with a larger batch and no objective or constraint gets
  better (a study whose only time objective is the p95 per call, without a per-sample
  bound), the same configuration at a larger batch size is dominated by it at a smaller one:
  it can never reach the front, whatever the selection picks from that front
  (`larger_batches_dominated`). Such a study leans per call, its local search never steps a
  batch size up nor proposes a configuration whose sibling at a smaller batch is known, it
  steps a point at a larger batch straight to the smallest, and its sampler leaves the batch
  size at the smallest (`smallest_batches`).
- Otherwise the batch size follows what the request asks for (`batch_lean`). A request
  leans per sample when it selects `highest_throughput` or `lowest_energy`, or when its
  objectives name only per-sample figures (`throughput`, `latency_per_sample`, `energy`)
  and not `latency`: the designed set runs where those points will be, at the smallest batch
  size whose time per sample is within 5% of the best the baseline showed (the baseline
  reads its call time at each batch size, up to `measurement.max_call_ms`; nothing else is
  proposed before it ends); past it a larger batch buys little per sample and costs long
  calls. It leans per call when it selects `lowest_latency` or its objectives name `latency`
  and no per-sample figure: the designed set runs at the smallest batch size (batch 1 in the
  bundled spaces). When both leanings are present the per-sample one wins:
  `highest_throughput` is never a default (and beside per-call objectives only a per-sample
  bound keeps larger batches on the front), and under per-sample-only objectives a batch-1
  point is dominated by the same variant at a larger batch, so a per-call selection never
  gets to pick it. A weighted selection leans as its heavier weights do. Objectives
  that name both views (the default: accuracy, latency and energy) have a front that spans
  both ends of the range, so there is no leaning: the designed set uses the middle batch
  size, and only the order of two batch sizes the same step away follows the selection
  (with a selection per call, each engine is also measured at the smallest batch:
  `autotune.strategies.autotune`).
- A per-sample selection (`highest_throughput`, `lowest_energy`) climbs past the level-off
  batch: the level-off rule picks where the designed set starts, not where the search
  stops (`autotune.strategies.autotune`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.contract import ConfigValue
from autotune.core.metrics import BOUNDS, OBJECTIVES, Lean, selection_objective

if TYPE_CHECKING:
    from autotune.requests.request import Selection, TuningRequest
    from autotune.space.search_space import EffectiveSpace

BATCH = "batch.size"
# A per-sample request's designed set runs at the smallest batch within this fraction of the
# best time per sample the baseline showed.
NEAR_BEST_PER_SAMPLE = 0.05


def larger_batches_dominated(objectives: Sequence[str], bounds: Iterable[str] = ()) -> bool:
    """Whether a configuration at a larger batch size is dominated by the same one at a
    smaller batch: some objective gets worse with the batch (it leans per call) and no
    objective or bound (`constraints` names) gets better (leans per sample). The objectives
    that lean neither way depend on the model variant alone."""
    metrics = [OBJECTIVES[name] for name in objectives]
    bound_metrics = [BOUNDS[name].metric for name in bounds]
    if any(metric.lean == "per_sample" for metric in [*metrics, *bound_metrics]):
        return False
    return any(metric.lean == "per_call" for metric in metrics)


def bounded(request: TuningRequest) -> list[str]:
    """The constraints the request sets."""
    return list(request.constraints.model_dump(exclude_none=True))


def batch_lean(
    selection: Selection, objectives: Sequence[str], bounds: Iterable[str] = ()
) -> Lean | None:
    """The batch-size end a request favours (see the module's docstring): per call where a
    larger batch is dominated; None when its objectives name both views (its front spans both
    ends); else per sample when its selection or its objectives lean so, else per call when
    either does, else None."""
    if larger_batches_dominated(objectives, bounds):
        return "per_call"
    named = {lean for o in objectives if (lean := OBJECTIVES[o].lean) is not None}
    if len(named) > 1:
        return None
    leans = {_selection_lean(selection), *named}
    if "per_sample" in leans:
        return "per_sample"
    return "per_call" if "per_call" in leans else None


def step_preference(
    selection: Selection, objectives: Sequence[str], bounds: Iterable[str] = ()
) -> Lean | None:
    """Which of two batch sizes the same step away the local search tries first: the
    request's lean, or where its objectives span both views, its selection's."""
    return batch_lean(selection, objectives, bounds) or _selection_lean(selection)


def request_lean(request: TuningRequest | None) -> Lean | None:
    if request is None:
        return None
    return batch_lean(request.selection, request.objectives, bounded(request))


def selection_lean(request: TuningRequest | None) -> Lean | None:
    """The batch-size end the request's selection favours (None: neither, or no request)."""
    return None if request is None else _selection_lean(request.selection)


def _selection_lean(selection: Selection) -> Lean | None:
    if selection.strategy != "weighted":
        return selection_objective(selection.strategy).lean
    totals = {"per_sample": 0.0, "per_call": 0.0}
    for objective, weight in (selection.weights or {}).items():
        lean = OBJECTIVES[objective].lean
        if lean is not None:
            totals[lean] += weight
    if totals["per_sample"] == totals["per_call"]:
        return None
    return "per_sample" if totals["per_sample"] > totals["per_call"] else "per_call"


@dataclass(frozen=True)
class BatchSteps:
    """How the local search ranks a step along the batch size, for one request."""

    lean: Lean | None = None
    preference: Lean | None = None
    larger_dominated: bool = False

    @classmethod
    def of(cls, request: TuningRequest | None) -> BatchSteps:
        if request is None:
            return cls()
        selection, objectives, bounds = request.selection, request.objectives, bounded(request)
        return cls(
            batch_lean(selection, objectives, bounds),
            step_preference(selection, objectives, bounds),
            larger_batches_dominated(objectives, bounds),
        )

    def rank(
        self, batches: list[ConfigValue], here: ConfigValue, there: ConfigValue
    ) -> tuple[int, bool, bool] | None:
        """For a step from `here` to `there` among `batches`: its length in places, whether
        it moves away from the lean's end and whether from the preferred end; None for a step
        up where larger batches are dominated, and there a step down counts its places from
        the smallest batch (which dominates every larger one)."""
        if self.larger_dominated:
            if as_number(there) > as_number(here):
                return None
            return sum(as_number(b) < as_number(there) for b in batches), False, False
        step = abs(batches.index(there) - batches.index(here))
        return step, _against(self.lean, here, there), _against(self.preference, here, there)


def _against(lean: Lean | None, here: ConfigValue, there: ConfigValue) -> bool:
    """Whether a batch size step from `here` to `there` moves away from the lean's end."""
    if lean is None:
        return False
    larger = as_number(there) > as_number(here)
    return larger if lean == "per_call" else not larger


def designed_batch(
    batches: list[ConfigValue],
    lean: Lean | None,
    call_ms_by_batch: dict[int, float],
    max_call_ms: float | None = None,
) -> ConfigValue:
    """The smallest batch size when the request leans per call, the middle one without a
    lean. Leaning per sample: the smallest whose time per sample, on the baseline's call
    times by batch size, is within `NEAR_BEST_PER_SAMPLE` of the best of them (past it a
    larger batch buys little and costs long calls); the largest without those times. Never
    one at or past a batch whose baseline call took longer than `max_call_ms`: then the
    largest batch below it."""
    over = [b for b, ms in call_ms_by_batch.items() if max_call_ms is not None and ms > max_call_ms]
    within = [b for b in batches if not over or as_number(b) < min(over)] or batches[:1]
    if lean is None:
        middle = as_number(batches[len(batches) // 2])
        return max((b for b in within if as_number(b) <= middle), key=as_number, default=within[0])
    if lean == "per_call":
        return within[0]
    per_sample = {b: ms / b for b, ms in call_ms_by_batch.items() if b in within and b > 0}
    if not per_sample:
        return within[-1]
    best = min(per_sample.values())
    return min(b for b, t in per_sample.items() if t <= best * (1 + NEAR_BEST_PER_SAMPLE))


def smallest_batches(space: EffectiveSpace) -> dict[str, ConfigValue]:
    """Each batch-size parameter of the space at its smallest value: what the sampler is held
    to where larger batches are dominated."""
    return {
        dim.parameter: min(dim.values, key=as_number)
        for dim in space.dimensions
        if dim.name == BATCH and dim.values
    }


def smaller_batches(space: EffectiveSpace, config: dict[str, ConfigValue]) -> list[ConfigValue]:
    """The space's batch sizes below `config`'s."""
    if BATCH not in config:
        return []
    return [b for b in space.choices().get(BATCH, []) if as_number(b) < as_number(config[BATCH])]


def as_number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def batches_within(
    batches: Sequence[ConfigValue], batch: Any, call_ms: float, max_call_ms: float | None
) -> list[ConfigValue]:
    """The `batches` below `batch` whose call stays within `max_call_ms` at `call_ms` (a call
    at `batch`) per sample, the largest first; none without a bound."""
    if max_call_ms is None or as_number(batch) <= 0:
        return []
    per_sample = call_ms / as_number(batch)
    within = [
        b
        for b in batches
        if as_number(b) < as_number(batch) and as_number(b) * per_sample <= max_call_ms
    ]
    return sorted(within, key=as_number, reverse=True)
