"""The strategy's targeted steps for an int8 variant that breaks the accuracy bound, the
order a person quantizing a model by hand takes them in (`more_accurate`):

1. "calibration": the next static int8 `precision.calibration` in `CALIBRATION_ORDER`
   (every node stays int8, so it costs no speed);
2. "op_types": the most accurate of those with `precision.op_types: matmul_only`
   (convolutions in float: an op-type-wise fallback, as Intel Neural Compressor's basic
   strategy takes before falling back node by node);
3. "fallback": the most accurate of the chain so far with a larger `precision.fallback`
   (more of its most sensitive nodes in float), until the bound holds or the values run
   out: the smallest value its model's sensitivity ranking predicts to meet the bound
   (`autotune.core.int8_fallback`), the next value without a ranking. Where the ranking
   predicts that the bound needs more than a quarter of the quantizable nodes in float,
   int8 cannot pay on this model and no fallback is measured
   (`autotune.core.int8_fallback.pays`); the study's end says so (`int8_outlook`).

A chain starts at its root: the configuration with the first calibration, every op type
and no node in float, where that was measured; one chain raises one step at a time.
The measured accuracy decides every step; the predictions only pick what to measure."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.core.contract import ConfigValue
from autotune.core.contract.trials import SensitivityTable
from autotune.core.int8_fallback import (
    STATIC_OP_TYPES,
    fallback_needed,
    pays,
    quantized_nodes,
    ranking_of,
)
from autotune.core.knobs import FALLBACK_KEY, PRECISION_KEY, variant_key
from autotune.core.knobs.engines import CALIBRATION, OP_TYPES
from autotune.core.metrics import ACCURACY, LATENCY_P95, Metric
from autotune.strategies.batch_sizes import as_number
from autotune.strategies.designed import changed, config_key
from autotune.strategies.steps import figure

if TYPE_CHECKING:
    from autotune.strategies.autotune import Ledger

# The order static int8's calibrations are tried in while a variant breaks the accuracy
# bound: the baseline's first, the percentile before entropy (whose histogram is slow to
# collect).
CALIBRATION_ORDER = ("minmax", "percentile", "entropy")
NARROWER_OP_TYPES = "matmul_only"
FLOAT = "fp32"
# A trial's statuses that measured its variant's accuracy.
MEASURED = ("ok", "infeasible")
Blocked = Callable[[dict[str, ConfigValue]], bool]
Step = tuple[dict[str, ConfigValue], str]


def more_accurate(ledger: Ledger, excluded: set[str], blocked: Blocked) -> Step | None:
    """The next step (the module's docstring) of a measured int8 configuration whose variant
    breaks the bound, with its kind; None where no such step is left or every one is known,
    excluded, blocked or cannot be built."""
    for key, outcome in ledger.finished.items():
        config = dict(key)
        if outcome.status not in MEASURED or variant_key(config) not in excluded:
            continue
        if _root(ledger, config) != config:
            continue  # its chain's root raises the steps
        step = _next_step(ledger, config, excluded, blocked)
        if step is not None:
            return step
    return None


def _root(ledger: Ledger, config: dict[str, ConfigValue]) -> dict[str, ConfigValue]:
    """`config` with its chain's first settings, where that was measured; else `config`."""
    offered = ledger.space.choices().get(CALIBRATION.key, [])
    first = next((c for c in CALIBRATION_ORDER if c in offered), None)
    settings: dict[str, ConfigValue] = {OP_TYPES.key: OP_TYPES.default, FALLBACK_KEY: 0}
    if first is not None:
        settings[CALIBRATION.key] = first
    root = changed(ledger.space, config, {k: v for k, v in settings.items() if k in config})
    outcome = ledger.finished.get(config_key(root))
    return root if outcome is not None and outcome.status in MEASURED else config


def _next_step(
    ledger: Ledger, root: dict[str, ConfigValue], excluded: set[str], blocked: Blocked
) -> Step | None:
    """The chain's first unmeasured step from `root`; None while one is being measured, once
    one held the bound, or where none is left."""
    chain = [root]
    for option in _recalibrations(ledger, root, blocked):
        state = _state(ledger, option, excluded)
        if state != BROKE:
            return (option, "calibration") if state == NEW else None
        chain.append(option)
    narrower = _narrower(ledger, _most_accurate(ledger, chain), blocked)
    if narrower is not None:
        state = _state(ledger, narrower, excluded)
        if state != BROKE:
            return (narrower, "op_types") if state == NEW else None
        chain.append(narrower)
    here = _most_accurate(ledger, chain)
    while (in_float := _more_in_float(ledger, here, blocked)) is not None:
        state = _state(ledger, in_float, excluded)
        if state != BROKE:
            return (in_float, "fallback") if state == NEW else None
        here = in_float
    return None


# A step's state: measured and broke the bound (the chain goes on past it), known otherwise
# (being measured, or it held the bound: the chain waits or ends), or new (to be measured).
BROKE, KNOWN, NEW = "broke", "known", "new"


def _state(ledger: Ledger, option: dict[str, ConfigValue], excluded: set[str]) -> str:
    if variant_key(option) in excluded:
        return BROKE
    return KNOWN if ledger.known(config_key(option)) else NEW


def _recalibrations(
    ledger: Ledger, config: dict[str, ConfigValue], blocked: Blocked
) -> list[dict[str, ConfigValue]]:
    """`config` with each calibration after its own in `CALIBRATION_ORDER` that the space
    offers it (the dimension is active) and that can be measured."""
    offered = ledger.space.choices().get(CALIBRATION.key, [])
    if config.get(CALIBRATION.key) not in CALIBRATION_ORDER:
        return []
    here = CALIBRATION_ORDER.index(str(config[CALIBRATION.key]))
    options = []
    for calibration in CALIBRATION_ORDER[here + 1 :]:
        option = changed(ledger.space, config, {CALIBRATION.key: calibration})
        active = calibration in offered and option.get(CALIBRATION.key) == calibration
        if active and _measurable(ledger, option, blocked):
            options.append(option)
    return options


def _narrower(
    ledger: Ledger, config: dict[str, ConfigValue], blocked: Blocked
) -> dict[str, ConfigValue] | None:
    """`config` quantizing MatMul and Gemm alone, where it quantizes every op type and the
    space offers the narrower choice to it."""
    offered = ledger.space.choices().get(OP_TYPES.key, [])
    if config.get(OP_TYPES.key) != OP_TYPES.default or NARROWER_OP_TYPES not in offered:
        return None
    option = changed(ledger.space, config, {OP_TYPES.key: NARROWER_OP_TYPES})
    if option.get(OP_TYPES.key) != NARROWER_OP_TYPES:
        return None
    return option if _measurable(ledger, option, blocked) else None


def _measurable(ledger: Ledger, option: dict[str, ConfigValue], blocked: Blocked) -> bool:
    """Not blocked, buildable, and not a measurement that failed."""
    outcome = ledger.finished.get(config_key(option))
    if outcome is not None and outcome.status not in MEASURED:
        return False
    if blocked(option) or ledger.unsupported_like(option) is not None:
        return False
    return ledger.space.produces(option)


def _most_accurate(ledger: Ledger, chain: list[dict[str, ConfigValue]]) -> dict[str, ConfigValue]:
    """The chain's configuration with the highest measured accuracy (the first on a tie or
    where none was measured)."""
    measured = [(measured_figure(ledger, c, ACCURACY), -i, c) for i, c in enumerate(chain)]
    known = [(accuracy, order, c) for accuracy, order, c in measured if accuracy is not None]
    return max(known, key=lambda t: (t[0], t[1]))[2] if known else chain[0]


def _more_in_float(
    ledger: Ledger, config: dict[str, ConfigValue], blocked: Blocked
) -> dict[str, ConfigValue] | None:
    """`config` with the `precision.fallback` `_fallback_step` picks, where that is active,
    not blocked and can be built; None where there is none, or int8 cannot pay."""
    fallbacks = sorted(ledger.space.choices().get(FALLBACK_KEY, []), key=as_number)
    more = [f for f in fallbacks if as_number(f) > as_number(config.get(FALLBACK_KEY))]
    step = _fallback_step(ledger, config, more) if more else None
    if step is None:
        return None
    option = changed(ledger.space, config, {FALLBACK_KEY: step})
    if option.get(FALLBACK_KEY) != step or blocked(option):
        return None  # the dimension is not active for this configuration, or it waits
    return option if ledger.space.produces(option) else None


def _fallback_step(
    ledger: Ledger, config: dict[str, ConfigValue], more: list[ConfigValue]
) -> ConfigValue | None:
    """Of the fallbacks `more` (above `config`'s, ascending), the smallest predicted to meet
    the accuracy bound, or the largest where the prediction needs more and int8 still pays;
    None where it cannot pay (`slower_than_float`, or the prediction needs too many nodes)
    or none is below the ranking's node count; the first where there is no prediction:
    `config`'s drop or the baseline's accuracy not measured, no bound, or no ranking of
    `config`'s model and int8 mode that measured a drop."""
    if slower_than_float(ledger, config):
        return None
    drop, table = accuracy_drop(ledger, config), ranking(ledger, config)
    op_types = quantized_op_types(config)
    if table is not None:
        more = [f for f in more if as_number(f) < quantized_nodes(table, op_types)]
    bound = None if ledger.request is None else ledger.request.constraints.max_accuracy_drop
    if not more or drop is None or table is None or bound is None:
        return more[0] if more else None
    here = int(as_number(config.get(FALLBACK_KEY)))
    needed = fallback_needed(table, drop, here, bound, op_types)
    if needed is None:
        return more[0]
    if not pays(table, needed, op_types):
        return None
    return next((f for f in more if as_number(f) >= needed), more[-1])


def slower_than_float(ledger: Ledger, config: dict[str, ConfigValue]) -> bool:
    """Whether `config`'s int8 variant measured a p95 call time no shorter than the same
    configuration's in fp32: more nodes in float cannot make it beat float."""
    fp32 = changed(ledger.space, config, {PRECISION_KEY: FLOAT})
    int8_ms = measured_figure(ledger, config, LATENCY_P95)
    fp32_ms = measured_figure(ledger, fp32, LATENCY_P95)
    return int8_ms is not None and fp32_ms is not None and int8_ms >= fp32_ms


def beyond_ranking(ledger: Ledger, config: dict[str, ConfigValue]) -> str | None:
    """Why `config` cannot be built, where its `precision.fallback` keeps as many nodes in
    float as its model's ranking holds of the op types it quantizes, or more."""
    fallback = int(as_number(config.get(FALLBACK_KEY, 0)))
    table = ranking(ledger, config) if fallback else None
    if table is None:
        return None
    nodes = quantized_nodes(table, quantized_op_types(config))
    if fallback < nodes:
        return None
    return (
        f"{FALLBACK_KEY}={fallback}: the model's {table.label} ranking holds {nodes} "
        "quantizable nodes of the op types it quantizes, and an int8 model keeps some in int8"
    )


def quantized_op_types(config: dict[str, ConfigValue]) -> tuple[str, ...] | None:
    """The op types `config`'s int8 variant quantizes (None: every one its mode does)."""
    return STATIC_OP_TYPES.get(str(config.get(OP_TYPES.key, OP_TYPES.default)))


def accuracy_drop(ledger: Ledger, config: dict[str, ConfigValue]) -> float | None:
    """`config`'s measured accuracy below the baseline's (None: either is not measured)."""
    measured = measured_figure(ledger, config, ACCURACY)
    baseline = measured_figure(ledger, ledger.space.baseline(), ACCURACY)
    return None if measured is None or baseline is None else baseline - measured


def measured_figure(ledger: Ledger, config: dict[str, ConfigValue], metric: Metric) -> float | None:
    """`metric` as the configuration's measurement gave it: a trial measured whole, or one
    its short window screened out (its accuracy is the full evaluation's)."""
    return figure(ledger, config, metric, statuses=("ok", "screened"))


def ranking(ledger: Ledger, config: dict[str, ConfigValue]) -> SensitivityTable | None:
    """The int8 sensitivity ranking of `config`'s model in its int8 mode (`ranking_of`)."""
    outcome = ledger.finished.get(config_key(config))
    model = (
        None if outcome is None or outcome.provenance is None else outcome.provenance.model_sha256
    )
    return ranking_of(ledger.sensitivity.values(), model, config)
