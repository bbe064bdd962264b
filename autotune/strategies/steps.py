"""A targeted step of autotune's strategy, proposed before its local search: a per-sample
selection's best point tried at the next larger batch while the last step up still paid,
then at its other thread counts (`climb`); and the figure lookups and comparisons the
strategy's steps share (`figure`, `improves`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.core.contract import ConfigValue
from autotune.core.knobs import variant_key
from autotune.core.metrics import Metric, selection_objective
from autotune.strategies.batch_sizes import BATCH, as_number
from autotune.strategies.designed import changed, config_key

if TYPE_CHECKING:
    from autotune.requests.request import TuningRequest
    from autotune.strategies.autotune import Ledger


# A per-sample selection's best climbs to the next batch size only while its last step up
# gained more than this share (less is within a measurement's noise).
CLIMB_GAIN = 0.02
THREADS = "runtime.threads"


def climb(
    ledger: Ledger,
    front: list[dict[str, ConfigValue]],
    excluded: set[str],
    blocked: Callable[[dict[str, ConfigValue]], bool],
) -> dict[str, ConfigValue] | None:
    """The selection's best point of the `front` at the next larger batch size, where the
    selection ranks by a figure per sample and the best's own step up to its batch still
    gained more than `CLIMB_GAIN` (see the module's docstring); once that climb stops, the
    best point at its other thread counts, nearest first (more threads can pay at a large
    batch where they did not at a small one). None otherwise, or where those configurations
    are known, excluded, blocked or cannot be built."""
    metric = climbed_metric(ledger.request)
    best = None if metric is None else _best(ledger, front, metric)
    if metric is None or best is None:
        return None
    for option in (_larger_batch(ledger, best, metric), *_other_threads(ledger, best)):
        if option is None or ledger.known(config_key(option)):
            continue
        if variant_key(option) in excluded or blocked(option):
            continue
        if ledger.unsupported_like(option) is None and ledger.space.produces(option):
            return option
    return None


def _larger_batch(
    ledger: Ledger, best: dict[str, ConfigValue], metric: Metric
) -> dict[str, ConfigValue] | None:
    """`best` at the next larger batch size while its own last step up gained more than
    `CLIMB_GAIN`; None at the largest batch or once a step gained less."""
    batches = sorted(ledger.space.choices().get(BATCH, []), key=as_number)
    if best[BATCH] not in batches[:-1]:
        return None
    here = batches.index(best[BATCH])
    if here > 0:
        below = figure(ledger, changed(ledger.space, best, {BATCH: batches[here - 1]}), metric)
        if below is not None and not improves(
            metric, below, figure(ledger, best, metric), by=CLIMB_GAIN
        ):
            return None
    return changed(ledger.space, best, {BATCH: batches[here + 1]})


def _other_threads(ledger: Ledger, best: dict[str, ConfigValue]) -> list[dict[str, ConfigValue]]:
    """`best` at each other thread count of the space, nearest first."""
    if THREADS not in best:
        return []
    here = as_number(best[THREADS])
    counts = [c for c in ledger.space.choices().get(THREADS, []) if c != best[THREADS]]
    counts.sort(key=lambda count: abs(as_number(count) - here))
    return [changed(ledger.space, best, {THREADS: count}) for count in counts]


def _best(
    ledger: Ledger, front: list[dict[str, ConfigValue]], metric: Metric
) -> dict[str, ConfigValue] | None:
    """The front's point with the best measured `metric` that has a batch size."""
    figures = [
        (value, config)
        for config in front
        if BATCH in config and (value := figure(ledger, config, metric)) is not None
    ]
    if not figures:
        return None
    pick = max if metric.direction == "maximize" else min
    return pick(figures, key=lambda pair: pair[0])[1]


def figure(
    ledger: Ledger,
    config: dict[str, ConfigValue],
    metric: Metric,
    statuses: tuple[str, ...] = ("ok",),
) -> float | None:
    """`metric` as the configuration's measurement gave it, where its trial ended in one of
    `statuses` (None: not measured so)."""
    outcome = ledger.finished.get(config_key(config))
    if outcome is None or outcome.status not in statuses or outcome.metrics is None:
        return None
    value = getattr(outcome.metrics, metric.name, None)
    return None if value is None else float(value)


def climbed_metric(request: TuningRequest | None) -> Metric | None:
    """The selection's figure where it is one per sample (a larger batch improves it)."""
    if request is None or request.selection.strategy == "weighted":
        return None
    metric = selection_objective(request.selection.strategy)
    return metric if metric.lean == "per_sample" else None


def improves(metric: Metric, before: float, after: float | None, by: float = 0.0) -> bool:
    """Whether `after` improves on `before` by more than the share `by`."""
    if after is None:
        return False
    if metric.direction == "maximize":
        return after > before * (1 + by)
    return after < before * (1 - by)
