"""The order autotune's designed set is measured in, and what it learns on the way, so that
points likely to reach the front come first.

- Thread probe: right after the baseline, the baseline at the thread count farthest from its
  own. A thread count moves how fast and how costly a configuration runs much the same way
  across engines and precisions on one machine (a loaded machine can make fewer threads
  faster and cheaper across the board); where the probe dominates the baseline on the
  request's objectives that the thread count moves, the designed set runs at its thread
  count instead of the baseline's.
- The baseline's precision on each engine at the designed batch size comes first: it ranks
  the engines, by their first point on the front (largest hypervolume contribution first;
  an engine without a point on it last).
- Then, before the other designed points: a per-sample selection's climb
  (`steps.climb`); where the front's largest contributor runs another precision than the
  baseline's, that point one batch step toward the selection's end (a precision's effect
  holds across batch sizes), then that precision on the other engines, then the point at
  its other batch sizes ("batch sibling").
- The other precisions, engine by engine in the engines' order: precision and engine
  interact too much (an int8 kernel fast on one engine is slow on another) to predict one
  engine's precisions from another's. Then each engine's point at batch 1 (the per-call
  selection's), in the precision that gave that engine its best figure of the selection's
  objective at the designed batch size.
- Last, the pairs the knobs declare refused (`Engine.precisions`): the worker's own check
  turns them away, so they tell nothing until then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.core.contract import ConfigValue
from autotune.core.knobs import ENGINE_KEY, ENGINES, variant_key
from autotune.core.metrics import OBJECTIVES, Metric, selection_objective
from autotune.strategies.batch_sizes import BATCH, BatchSteps, as_number
from autotune.strategies.designed import changed, config_key
from autotune.strategies.steps import climb, figure, improves

if TYPE_CHECKING:
    from autotune.strategies.autotune import Ledger

THREADS = "runtime.threads"
PRECISION = "precision.mode"


def thread_probe(ledger: Ledger) -> dict[str, ConfigValue] | None:
    """The baseline at the thread count farthest from its own, where the space has another
    one and the request has objectives the thread count moves; None otherwise."""
    baseline = ledger.space.baseline()
    counts = ledger.space.choices().get(THREADS, [])
    if not ledger.designed or not _timed_objectives(ledger):
        return None
    if THREADS not in baseline or len(counts) < 2:
        return None
    here = as_number(baseline[THREADS])
    farthest = max(counts, key=lambda count: abs(as_number(count) - here))
    probe = changed(ledger.space, baseline, {THREADS: farthest})
    return probe if probe != baseline and ledger.space.produces(probe) else None


def probed_threads(ledger: Ledger) -> ConfigValue | None:
    """The probe's thread count where its measurement dominates the baseline's on the
    request's objectives that the thread count moves; None otherwise (or not yet known)."""
    probe = thread_probe(ledger)
    if probe is None:
        return None
    metrics = _timed_objectives(ledger)
    baseline = [figure(ledger, ledger.space.baseline(), metric) for metric in metrics]
    probed = [figure(ledger, probe, metric) for metric in metrics]
    if None in baseline or None in probed:
        return None
    pairs = list(zip(metrics, baseline, probed, strict=True))
    better = [improves(m, b, p) for m, b, p in pairs if b is not None]
    worse = [improves(m, p, b) for m, b, p in pairs if p is not None]
    return probe[THREADS] if any(better) and not any(worse) else None


def next_designed(
    ledger: Ledger,
    front: Callable[[], list[dict[str, ConfigValue]]],
    excluded: set[str],
    blocked: Callable[[dict[str, ConfigValue]], bool],
) -> tuple[dict[str, ConfigValue], str] | None:
    """The thread probe while unknown, then the designed configuration to measure next (see
    the module's docstring), at the probed thread count, with why; None once all are known."""
    probe = thread_probe(ledger)
    if probe is not None and not ledger.known(config_key(probe)):
        return probe, "threads probe"
    planned = _planned(ledger, excluded)
    if not planned:
        return None
    best = front()
    main_batch = _main_batch(ledger)
    baseline_precision = ledger.space.baseline().get(PRECISION)
    first = [c for c in planned if c.get(BATCH) == main_batch and _in(c, baseline_precision)]
    if first:
        return first[0], "designed"
    larger = climb(ledger, best, excluded, blocked)
    if larger is not None:
        return larger, "climb"
    siblings = _batch_siblings(ledger, best, excluded, blocked)
    if siblings and siblings[0][0]:
        return siblings[0][1], "batch sibling"
    ranks = _engine_ranks(best)
    top_precision = best[0].get(PRECISION) if best else None
    transfer = [
        config
        for config in planned
        if config.get(BATCH) == main_batch
        and declared_to_run(config)
        and top_precision != baseline_precision
        and _in(config, top_precision)
    ]
    if transfer:
        return min(transfer, key=lambda c: _rank(ranks, c)), "designed"
    if siblings:
        return siblings[0][1], "batch sibling"

    def order(pair: tuple[int, dict[str, ConfigValue]]) -> tuple[int, int, int]:
        index, config = pair
        if not declared_to_run(config):
            return 2, 0, index
        return config.get(BATCH) != main_batch, _rank(ranks, config), index

    return min(enumerate(planned), key=order)[1], "designed"


def _in(config: dict[str, ConfigValue], precision: ConfigValue | None) -> bool:
    return config.get(PRECISION) == precision


def _rank(ranks: dict[str, int], config: dict[str, ConfigValue]) -> int:
    return ranks.get(str(config.get(ENGINE_KEY)), len(ranks))


def _batch_siblings(
    ledger: Ledger,
    front: list[dict[str, ConfigValue]],
    excluded: set[str],
    blocked: Callable[[dict[str, ConfigValue]], bool],
) -> list[tuple[bool, dict[str, ConfigValue]]]:
    """Where the front's largest contributor runs another precision than the baseline's,
    that point at the other batch sizes it has not been measured at, nearest first (as the
    request's batch steps allow), each with whether it is one step toward the preferred end:
    a precision's effect holds across batch sizes."""
    if not front or BATCH not in front[0]:
        return []
    top = front[0]
    if top.get(PRECISION) == ledger.space.baseline().get(PRECISION):
        return []
    batches = ledger.space.choices().get(BATCH, [])
    steps = BatchSteps.of(ledger.request)
    siblings = []
    for there in batches:
        rank = None if there == top[BATCH] else steps.rank(batches, top[BATCH], there)
        option = changed(ledger.space, top, {BATCH: there})
        if rank is None or ledger.known(config_key(option)) or variant_key(option) in excluded:
            continue
        if not blocked(option) and ledger.space.produces(option):
            siblings.append((rank, option))
    siblings.sort(key=lambda pair: pair[0])
    return [(rank[0] == 1 and not rank[2], option) for rank, option in siblings]


def declared_to_run(config: dict[str, ConfigValue]) -> bool:
    """Whether the configuration's engine declares it runs the configuration's precision
    (`Engine.precisions`); a pair it does not is refused by the worker's own check."""
    engine = ENGINES.get(str(config.get(ENGINE_KEY)))
    return engine is None or PRECISION not in config or str(config[PRECISION]) in engine.precisions


def _planned(ledger: Ledger, excluded: set[str]) -> list[dict[str, ConfigValue]]:
    """The designed configurations as they would be measured now, those not yet known."""
    threads = probed_threads(ledger)
    main_batch = _main_batch(ledger)
    planned = []
    for config in ledger.designed:
        option = changed(ledger.space, config, {THREADS: threads}) if threads else config
        if config.get(BATCH) != main_batch:
            option = _in_best_precision(ledger, option, main_batch, excluded)
        if option != config and not ledger.space.produces(option):
            option = config
        if not ledger.known(config_key(option)) and option not in planned:
            planned.append(option)
    return planned


def _in_best_precision(
    ledger: Ledger,
    config: dict[str, ConfigValue],
    main_batch: ConfigValue | None,
    excluded: set[str],
) -> dict[str, ConfigValue]:
    """`config` in the precision its engine measured best at `main_batch` (by the
    selection's objective), of the variants not known to break the accuracy bound."""
    if ledger.request is None or ledger.request.selection.strategy == "weighted":
        return config
    metric = selection_objective(ledger.request.selection.strategy)
    best: tuple[float, ConfigValue | None] | None = None
    for key, outcome in ledger.finished.items():
        measured = dict(key)
        if outcome.status != "ok" or variant_key(measured) in excluded:
            continue
        if measured.get(ENGINE_KEY) != config.get(ENGINE_KEY) or measured.get(BATCH) != main_batch:
            continue
        value = figure(ledger, measured, metric)
        if value is None:
            continue
        score = -value if metric.direction == "maximize" else value
        if best is None or score < best[0]:
            best = (score, measured.get(PRECISION))
    if best is None or best[1] is None:
        return config
    return changed(ledger.space, config, {PRECISION: best[1]})


def _main_batch(ledger: Ledger) -> ConfigValue | None:
    """The batch size of the designed set's first configuration (its precisions' batch)."""
    return ledger.designed[0].get(BATCH) if ledger.designed else None


def _engine_ranks(front: list[dict[str, ConfigValue]]) -> dict[str, int]:
    """Each engine's place by its first point on the `front` (given best first)."""
    ranks: dict[str, int] = {}
    for config in front:
        ranks.setdefault(str(config.get(ENGINE_KEY)), len(ranks))
    return ranks


def _timed_objectives(ledger: Ledger) -> list[Metric]:
    """The request's objectives that the batch or thread count moves (time, energy, cost)."""
    if ledger.request is None:
        return []
    return [OBJECTIVES[name] for name in ledger.request.objectives if OBJECTIVES[name].lean]
