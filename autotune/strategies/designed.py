"""autotune's designed initial set: each precision on each engine at the batch size the
request leans to (`autotune.strategies.batch_sizes`), everything else as the baseline runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.core.contract import ConfigValue
from autotune.strategies.batch_sizes import (
    BATCH,
    as_number,
    designed_batch,
    request_lean,
    selection_lean,
)

if TYPE_CHECKING:
    from autotune.requests.request import TuningRequest
    from autotune.space.search_space import EffectiveSpace

ConfigKey = tuple[tuple[str, Any], ...]


def config_key(config: dict[str, Any]) -> ConfigKey:
    return tuple(sorted(config.items()))


def designed_configs(
    space: EffectiveSpace,
    request: TuningRequest | None = None,
    call_ms_by_batch: dict[int, float] | None = None,
) -> list[dict[str, ConfigValue]]:
    """Each precision on each engine at one batch size (see `designed_batch`), then, where
    the objectives span both ends of the batch range and the selection ranks by the time per
    call, each engine at the smallest batch size: the batch the choice is made at. The rest as the
    baseline runs (a dimension that only the change makes active at its own baseline); only
    configurations the space can produce, without the baseline itself."""
    choices = space.choices()
    if BATCH not in choices:
        return _designed_at(space, {}, _alternatives(choices, "precision.mode"))
    batches = sorted(choices[BATCH], key=as_number)
    max_call_ms = None if request is None else request.measurement.max_call_ms
    times = call_ms_by_batch or {}
    lean = request_lean(request)
    batch = designed_batch(batches, lean, times, max_call_ms)
    designed = _designed_at(space, {BATCH: batch}, _alternatives(choices, "precision.mode"))
    if lean is None and selection_lean(request) == "per_call":
        smallest = designed_batch(batches, "per_call", times, max_call_ms)
        per_call = _designed_at(space, {BATCH: smallest}, [{}])
        designed += [config for config in per_call if config not in designed]
    return designed


def _designed_at(
    space: EffectiveSpace, batch: dict[str, ConfigValue], precisions: list[dict[str, ConfigValue]]
) -> list[dict[str, ConfigValue]]:
    """Each of `precisions` on each engine at `batch`, the rest as the baseline runs."""
    baseline = space.baseline()
    designed: list[dict[str, ConfigValue]] = []
    for precision in precisions:
        for engine in _alternatives(space.choices(), "runtime.engine"):
            config = changed(space, baseline, {**batch, **precision, **engine})
            if config != baseline and config not in designed and space.produces(config):
                designed.append(config)
    return designed


def changed(
    space: EffectiveSpace, config: dict[str, ConfigValue], changes: dict[str, ConfigValue]
) -> dict[str, ConfigValue]:
    """`config` with `changes`: a dimension they make active takes its baseline value (else
    its first), one they make inactive is dropped."""
    result: dict[str, ConfigValue] = {}
    for dim in space.dimensions:
        if not dim.active(result):
            continue
        if dim.name in changes:
            result[dim.name] = changes[dim.name]
        elif dim.name in config:
            result[dim.name] = config[dim.name]
        elif dim.baseline is not None:
            result[dim.name] = dim.baseline
        elif dim.values:
            result[dim.name] = dim.values[0]
    return result


def _alternatives(choices: dict[str, list[ConfigValue]], name: str) -> list[dict[str, ConfigValue]]:
    return [{name: value} for value in choices[name]] if name in choices else [{}]
