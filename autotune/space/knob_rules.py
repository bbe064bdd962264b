"""The knobs' validity rules applied to a search space: a value of a dimension the knobs know
(an engine, a precision mode, a pruning method, an engine's option) is kept only where the
earlier choices let the knobs build it (`autotune.core.knobs.supports`), so no strategy ever
proposes a combination that could have been rejected before anything was built.

For each such dimension the earlier choices that decide it (the engine, the device, the
provider, the precision, ...) are enumerated; the values each choice allows are grouped, and
choices that make no difference to the grouping are left out of the rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.core.contract import ConfigValue
from autotune.core.errors import Unsupported

if TYPE_CHECKING:
    from autotune.core.knobs import Target
    from autotune.space.search_space import EffectiveDimension

Context = tuple[tuple[str, ConfigValue | None], ...]


def parameter_name(key: str, values: list[ConfigValue]) -> str:
    """The Optuna parameter name of a dimension narrowed to `values`: `key[value,...]`."""
    return f"{key}[{','.join(str(v) for v in values)}]"


def parameter_key(param: str) -> str:
    """The configuration key an Optuna parameter name samples (`precision.mode[fp32,bf16]`:
    `precision.mode`)."""
    return param.split("[", 1)[0]


def split(
    dim: EffectiveDimension, earlier: list[EffectiveDimension], target: Target
) -> tuple[list[EffectiveDimension], list[dict[str, Any]]]:
    """`dim` as one or more dimensions that offer only what the knobs support after the
    earlier dimensions' choices, and the exclusions (as `Exclusion` fields) that made."""
    if dim.values is None or dim.name not in _subject_keys():
        return [dim], []
    allowed: dict[Context, list[ConfigValue]] = {}
    dropped: list[dict[str, Any]] = []
    for context in _contexts(earlier):
        config = dict(context)
        if not dim.active(_present(config)):
            continue
        kept = []
        for value in dim.values:
            reason = _reason({**config, dim.name: value}, target)
            if reason is None:
                kept.append(value)
            else:
                dropped.append({"dimension": dim.name, "value": value, "reason": reason,
                                "when": dict(context)})  # fmt: skip
        allowed[context] = kept
    if not allowed:
        return [dim], []
    allowed = _relevant(allowed)
    dropped = _unique(dropped, {k for context in allowed for k, _ in context}, allowed)
    return _dimensions(dim, allowed), dropped


def _subject_keys() -> set[str]:
    from autotune.core.knobs.config import known_keys

    return set(known_keys())


def _context_keys() -> set[str]:
    from autotune.core.knobs import DEVICE_KEY, engine_options, selecting_keys

    options = {o.key for o in engine_options() if o.values is not None}
    return {*selecting_keys(), DEVICE_KEY, *options}


def _contexts(earlier: list[EffectiveDimension]) -> list[Context]:
    """Every combination of the earlier deciding dimensions' values that sampling can reach;
    a dimension inactive there is None."""
    keys = _context_keys()
    configs: list[dict[str, ConfigValue | None]] = [{}]
    for dim in earlier:
        if dim.name not in keys or dim.values is None:
            continue
        grown: list[dict[str, ConfigValue | None]] = []
        for config in configs:
            present = _present(config)
            if dim.name in present:
                grown.append(config)  # an earlier dimension of this name already chose
            elif dim.active(present):
                grown.extend({**config, dim.name: value} for value in dim.values)
            else:
                grown.append({dim.name: None, **config})
        configs = grown
    return [tuple(sorted(c.items())) for c in configs]


def _present(config: dict[str, ConfigValue | None]) -> dict[str, ConfigValue]:
    """The choices made (None: a dimension inactive there)."""
    return {k: v for k, v in config.items() if v is not None}


def _reason(config: dict[str, ConfigValue | None], target: Target) -> str | None:
    from autotune.core.knobs import supports
    from autotune.core.knobs.config import parse_config

    try:
        parsed = parse_config(_present(config), target.model_kind or "torch")
    except Unsupported as error:
        return str(error)
    return supports(parsed, target)


def _relevant(allowed: dict[Context, list[ConfigValue]]) -> dict[Context, list[ConfigValue]]:
    """The same rule over fewer keys: a key is dropped while the values allowed stay a
    function of the keys left (an engine's options before the engine, device, precision and
    pruning method, which make the clearest rules)."""
    from autotune.core.knobs import DEVICE_KEY, ENGINE_KEY, PRECISION_KEY, PRUNE_KEY

    kept_longest = [ENGINE_KEY, DEVICE_KEY, PRECISION_KEY, PRUNE_KEY]  # the clearest rules
    keys = sorted(
        {k for context in allowed for k, _ in context},
        key=lambda k: -kept_longest.index(k) if k in kept_longest else -len(kept_longest),
    )
    for key in keys:
        reduced: dict[Context, list[ConfigValue]] = {}
        consistent = True
        for context, values in allowed.items():
            smaller = tuple((k, v) for k, v in context if k != key)
            if reduced.setdefault(smaller, values) != values:
                consistent = False
                break
        if consistent:
            allowed = reduced
    return allowed


def _unique(
    dropped: list[dict[str, Any]], keys: set[str], allowed: dict[Context, list[ConfigValue]]
) -> list[dict[str, Any]]:
    """One exclusion per value and relevant context; a value allowed nowhere, once. Its
    reason joins the distinct reasons of the contexts it stands for, each once."""
    anywhere = {v for values in allowed.values() for v in values}
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    reasons: dict[tuple[Any, ...], list[str]] = {}
    for exclusion in dropped:
        when = {k: v for k, v in exclusion["when"].items() if k in keys and v is not None}
        if exclusion["value"] not in anywhere:
            when = {}
        key = (exclusion["value"], tuple(sorted(when.items(), key=str)))
        seen.setdefault(key, {**exclusion, "when": when})
        known = reasons.setdefault(key, [])
        if exclusion["reason"] not in known:
            known.append(exclusion["reason"])
    return [{**exclusion, "reason": "; ".join(reasons[key])} for key, exclusion in seen.items()]


def _dimensions(
    dim: EffectiveDimension, allowed: dict[Context, list[ConfigValue]]
) -> list[EffectiveDimension]:
    groups: dict[tuple[ConfigValue, ...], list[Context]] = {}
    for context, values in allowed.items():
        if values:
            groups.setdefault(tuple(values), []).append(context)
    if len(groups) == 1 and all(allowed.values()):
        (only,) = groups
        return [_narrowed(dim, list(only), None)]
    return [
        _narrowed(dim, list(group), [dict(c) for c in contexts])
        for group, contexts in groups.items()
    ]


def _narrowed(
    dim: EffectiveDimension,
    values: list[ConfigValue],
    contexts: list[dict[str, ConfigValue | None]] | None,
) -> EffectiveDimension:
    full = list(dim.values or [])
    baseline: ConfigValue | None = None
    if dim.baseline is not None:
        baseline = dim.baseline if dim.baseline in values else values[0]
    param = dim.param if values == full else parameter_name(dim.name, values)
    return dim.model_copy(
        update={"values": values, "baseline": baseline, "param": param, "contexts": contexts}
    )
