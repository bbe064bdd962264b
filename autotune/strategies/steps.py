"""Two targeted steps of autotune's strategy, proposed before its local search: an int8
variant that breaks the accuracy bound tried with another static int8 calibration, then with
more of its most sensitive nodes in float (`more_accurate`), and a per-sample selection's
best point tried at the next larger batch while the last step up still paid, then at its
other thread counts (`climb`).

How many nodes go to float next is predicted from the model's int8 sensitivity ranking
(`SensitivityTable`: each node's drop, 1 - fidelity with that node alone in int8). Node drops
add up roughly for small perturbations, so a variant's accuracy drop is taken to be carried by
its nodes in proportion to their drops: with the ranking's measured drops summing to S, the k
largest to S_k, and the variant at fallback c measured at drop D, the drop with k nodes in
float is predicted as D × (1 − S_k / S) / (1 − S_c / S), which from c = 0 is D × (1 − S_k / S).
The prediction only picks what to measure: the measured accuracy still decides."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.core.contract import ConfigValue
from autotune.core.contract.trials import SensitivityTable
from autotune.core.knobs import FALLBACK_KEY, PRECISION_KEY, variant_key
from autotune.core.knobs.engines import CALIBRATION
from autotune.core.metrics import ACCURACY, Metric, selection_objective
from autotune.results.optuna_store import producible
from autotune.strategies.batch_sizes import BATCH, as_number
from autotune.strategies.designed import changed, config_key

if TYPE_CHECKING:
    from autotune.requests.request import TuningRequest
    from autotune.strategies.autotune import Ledger


# A per-sample selection's best climbs to the next batch size only while its last step up
# gained more than this share (less is within a measurement's noise).
CLIMB_GAIN = 0.02
THREADS = "runtime.threads"
# The order static int8's calibrations are tried in while a variant breaks the accuracy
# bound: the baseline's first, the percentile before entropy (whose histogram is slow to
# collect).
CALIBRATION_ORDER = ("minmax", "percentile", "entropy")
# A trial's statuses that measured its variant's accuracy.
MEASURED = ("ok", "infeasible")


def more_accurate(
    ledger: Ledger, excluded: set[str], blocked: Callable[[dict[str, ConfigValue]], bool]
) -> tuple[dict[str, ConfigValue], str] | None:
    """The next step for a measured int8 configuration whose variant breaks the accuracy
    bound: the same configuration with the next `precision.calibration` in
    `CALIBRATION_ORDER` ("calibration": every node stays int8, so it costs no speed), and
    once the calibrations the space offers it are exhausted, the last of them with a larger
    `precision.fallback` ("fallback": more of its most sensitive nodes in float, the step
    up a quantizer's fallback takes until the bound holds): the smallest its model's
    sensitivity ranking predicts to meet the bound, else the next. None where no such step
    is left or every one is known, excluded, blocked or cannot be built."""
    for key, outcome in ledger.finished.items():
        config = dict(key)
        if outcome.status not in MEASURED or variant_key(config) not in excluded:
            continue
        step = _next_step(ledger, config, excluded, blocked)
        if step is not None:
            return step
    return None


def _next_step(
    ledger: Ledger,
    config: dict[str, ConfigValue],
    excluded: set[str],
    blocked: Callable[[dict[str, ConfigValue]], bool],
) -> tuple[dict[str, ConfigValue], str] | None:
    """`config`'s next untried calibration, or, past the last one (whose variant broke the
    bound too), that one's next fallback. The fallback steps up from the last calibration
    alone, so the configurations of one chain never each raise their own. None while a
    calibration is being measured, or where one held the bound."""
    last = config
    for option in _recalibrations(ledger, config, blocked):
        if variant_key(option) in excluded:
            last = option
        elif ledger.known(config_key(option)):
            return None
        else:
            return option, "calibration"
    in_float = _more_in_float(ledger, last, excluded, blocked)
    return None if in_float is None else (in_float, "fallback")


def _recalibrations(
    ledger: Ledger,
    config: dict[str, ConfigValue],
    blocked: Callable[[dict[str, ConfigValue]], bool],
) -> list[dict[str, ConfigValue]]:
    """`config` with each calibration after its own in `CALIBRATION_ORDER` that the space
    offers it (the dimension is active), leaving out those blocked, that cannot be built or
    whose measurement failed."""
    offered = ledger.space.choices().get(CALIBRATION.key, [])
    if config.get(CALIBRATION.key) not in CALIBRATION_ORDER:
        return []
    here = CALIBRATION_ORDER.index(str(config[CALIBRATION.key]))
    options = []
    for calibration in CALIBRATION_ORDER[here + 1 :]:
        option = changed(ledger.space, config, {CALIBRATION.key: calibration})
        if calibration not in offered or option.get(CALIBRATION.key) != calibration:
            continue
        outcome = ledger.finished.get(config_key(option))
        if outcome is not None and outcome.status not in MEASURED:
            continue
        if blocked(option) or ledger.unsupported_like(option) is not None:
            continue
        if producible(ledger.space, option):
            options.append(option)
    return options


def _more_in_float(
    ledger: Ledger,
    config: dict[str, ConfigValue],
    excluded: set[str],
    blocked: Callable[[dict[str, ConfigValue]], bool],
) -> dict[str, ConfigValue] | None:
    """`config` with the `precision.fallback` `_fallback_step` picks, where that is active,
    unknown, not excluded nor blocked, and can be built."""
    fallbacks = sorted(ledger.space.choices().get(FALLBACK_KEY, []), key=as_number)
    more = [f for f in fallbacks if as_number(f) > as_number(config.get(FALLBACK_KEY))]
    if not more:
        return None
    step = _fallback_step(ledger, config, more)
    option = changed(ledger.space, config, {FALLBACK_KEY: step})
    if option.get(FALLBACK_KEY) != step:
        return None  # the dimension is not active for this configuration
    if ledger.known(config_key(option)) or blocked(option):
        return None  # a known step decides by its own measurement, as the next one to raise
    if variant_key(option) not in excluded and producible(ledger.space, option):
        return option
    return None


def _fallback_step(
    ledger: Ledger, config: dict[str, ConfigValue], more: list[ConfigValue]
) -> ConfigValue:
    """Of the fallbacks `more` (above `config`'s, ascending), the smallest predicted to meet
    the accuracy bound (see the module's docstring), or the largest where none is; the first
    where there is no prediction: `config`'s drop or the baseline's accuracy not measured,
    no bound, or no ranking of `config`'s model and int8 mode that measured a drop."""
    drop, table = accuracy_drop(ledger, config), ranking(ledger, config)
    bound = None if ledger.request is None else ledger.request.constraints.max_accuracy_drop
    if drop is None or table is None or bound is None:
        return more[0]
    here = int(as_number(config.get(FALLBACK_KEY)))
    for fallback in more:
        predicted = predicted_drop(table, drop, here, int(as_number(fallback)))
        if predicted is None:
            return more[0]
        if predicted <= bound:
            return fallback
    return more[-1]


def predicted_drop(table: SensitivityTable, drop: float, here: int, fallback: int) -> float | None:
    """The accuracy drop predicted with the `fallback` most sensitive nodes in float, for a
    variant measured at `drop` with `here` of them in float (the module's docstring); None
    where the ranking measured no drop, or none beyond the `here` nodes already in float."""
    drops = sorted((n.drop for n in table.nodes if n.drop is not None and n.drop > 0), reverse=True)
    total = sum(drops)
    left = 1.0 - sum(drops[:here]) / total if total > 0 else 0.0
    if left <= 0:
        return None
    return drop * (1.0 - sum(drops[:fallback]) / total) / left


def accuracy_drop(ledger: Ledger, config: dict[str, ConfigValue]) -> float | None:
    """`config`'s measured accuracy below the baseline's (None: either is not measured)."""
    measured = figure(ledger, config, ACCURACY)
    baseline = figure(ledger, ledger.space.baseline(), ACCURACY)
    return None if measured is None or baseline is None else baseline - measured


def ranking(ledger: Ledger, config: dict[str, ConfigValue]) -> SensitivityTable | None:
    """The int8 sensitivity ranking of `config`'s model in its int8 mode: the one of the
    model its trial measured, else the one ranking of that mode where only one is known (the
    model ranked may be an export or another variant's float model); None otherwise."""
    mode = str(config.get(PRECISION_KEY))
    outcome = ledger.finished.get(config_key(config))
    if outcome is not None and outcome.provenance is not None:
        found = ledger.sensitivity.get((outcome.provenance.model_sha256, mode))
        if found is not None:
            return found
    of_mode = [table for table in ledger.sensitivity.values() if table.mode == mode]
    return of_mode[0] if len(of_mode) == 1 else None


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
        if ledger.unsupported_like(option) is None and producible(ledger.space, option):
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


def figure(ledger: Ledger, config: dict[str, ConfigValue], metric: Metric) -> float | None:
    """`metric` as the configuration's measurement gave it (None: not measured)."""
    outcome = ledger.finished.get(config_key(config))
    if outcome is None or outcome.status != "ok" or outcome.metrics is None:
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
