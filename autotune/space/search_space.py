"""Declarative search spaces: YAML dimensions, filtered by the hardware's capabilities and
by the knobs' rules (`autotune.core.knobs`), sampled through Optuna's define-by-run API.

A dimension whose allowed values depend on earlier choices (the precision modes an engine
runs, say) becomes one dimension per distinct set of values, each active where the earlier
choices allow exactly that set; one whose set is narrower than the file's samples under its
own Optuna parameter name, `name[value,...]`, because Optuna keeps one distribution per name.
A configuration always uses the plain key."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from autotune import optuna_api
from autotune.core.contract import CAPABILITIES, ConfigValue, HardwareProfile, ModelInfo, Strict
from autotune.core.errors import SpaceError
from autotune.core.knobs import ENGINE_KEY, Target, declared_values
from autotune.space import knob_rules

if TYPE_CHECKING:
    import optuna

SPACES_DIR = Path(__file__).resolve().parents[2] / "search_spaces"
DEFAULT_SPACE = "default.yaml"

BATCH_KEY = "batch.size"

# What a model's format allows, next to what the hardware allows.
MODEL_CAPABILITIES = ("model.torch", "model.onnx")


def known_capabilities() -> list[str]:
    from autotune.core.knobs import ENGINES

    engines = [cap for engine in ENGINES.values() for cap in engine.provides]
    return sorted({*CAPABILITIES, *MODEL_CAPABILITIES, *engines})


# Share of device memory a trial may plan to fill; the rest is for the runtime itself.
MEMORY_HEADROOM = 0.8


def _batch_memory_limit(profile: HardwareProfile, model: ModelInfo | None) -> int | None:
    """The largest batch whose weights and activations fit the smallest device's memory.
    Activations are the model's per-sample upper bound; unknown without a model."""
    if model is None or not model.activation_bytes_per_sample:
        return None
    memory_mb = min(g.memory_mb for g in profile.gpus) if profile.gpus else profile.memory_mb
    free = memory_mb * 2**20 * MEMORY_HEADROOM - model.parameter_bytes
    return max(1, int(free // model.activation_bytes_per_sample))


# Numeric limits a dimension may tie its values to, read off the hardware (and the model).
LIMITS: dict[str, Callable[[HardwareProfile, ModelInfo | None], int | None]] = {
    "cpu_cores": lambda p, m: p.cpu_cores,
    "gpu_count": lambda p, m: len(p.gpus),
    "batch_memory": _batch_memory_limit,
}


class Range(Strict):
    low: float
    high: float
    step: float | None = Field(default=None, gt=0)
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _non_empty(self) -> Range:
        if self.high < self.low:
            raise ValueError(f"empty range: high {self.high} < low {self.low}")
        if self.log and (self.step is not None or self.low <= 0):
            raise ValueError("a log range needs low > 0 and no step")
        return self


# A dimension's name: a configuration key, `group.param` or deeper (`runtime.provider.<provider>.
# <option>`).
DIMENSION_NAME = r"^[a-z_]+(\.[a-z_0-9]+)+$"


class Dimension(Strict):
    """One searchable parameter, namespaced `group.param`."""

    name: str = Field(pattern=DIMENSION_NAME)
    values: list[ConfigValue] | None = Field(default=None, min_length=1)
    range: Range | None = None
    baseline: ConfigValue | Literal["max"] | list[ConfigValue] | None = Field(
        default=None,
        description="how the unmodified model runs: a value, 'max', or values in order of "
        "preference (the first one the hardware keeps)",
    )
    requires: list[str] = Field(default=[], description="capabilities the whole dimension needs")
    value_requires: dict[str, list[str]] = Field(
        default={}, description="value (as written) -> capabilities that value needs"
    )
    when: dict[str, list[ConfigValue]] = Field(
        default={}, description="active only when earlier dimensions take one of these values"
    )
    at_most: Literal["cpu_cores", "gpu_count", "batch_memory"] | None = None
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _declared_values(cls, data: Any) -> Any:
        """A knob's dimension that lists no values takes every value the knobs declare for
        its key (a new engine, or a plugin's, is searched without a change to the file)."""
        if not isinstance(data, dict) or "values" in data or "range" in data:
            return data
        declared = declared_values(str(data.get("name")))
        return data if declared is None else {**data, "values": declared}

    @model_validator(mode="after")
    def _values_or_range(self) -> Dimension:
        if (self.values is None) == (self.range is None):
            raise ValueError(
                "give exactly one of 'values' or 'range' (a knob's key may give neither: "
                "its declared values)"
            )
        if self.values is not None:
            listed = {str(v) for v in self.values}
            unknown = set(self.value_requires) - listed
            if unknown:
                raise ValueError(f"value_requires names values not listed: {sorted(unknown)}")
            for preferred in self.baseline_preferences():
                if preferred != "max" and preferred not in self.values:
                    raise ValueError(f"baseline {preferred!r} is not one of the values")
        return self

    def baseline_preferences(self) -> list[Any]:
        if self.baseline is None:
            return []
        return self.baseline if isinstance(self.baseline, list) else [self.baseline]


class SpaceFile(Strict):
    name: str
    description: str = ""
    dimensions: list[Dimension] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> SpaceFile:
        seen: set[str] = set()
        known = known_capabilities()
        for dim in self.dimensions:
            if dim.name in seen:
                raise ValueError(f"dimension {dim.name!r} is declared twice")
            requirements = [*dim.requires, *(c for cs in dim.value_requires.values() for c in cs)]
            for cap in (alt for req in requirements for alt in req.split("|")):
                if cap not in known:
                    raise ValueError(f"{dim.name}: unknown capability {cap!r} (known: {known})")
            for other in dim.when:
                if other not in seen:
                    raise ValueError(
                        f"{dim.name}: 'when' names {other!r}, not an earlier dimension"
                    )
            seen.add(dim.name)
        return self


class Exclusion(Strict):
    dimension: str
    value: ConfigValue | None = Field(description="None when the whole dimension is excluded")
    reason: str
    when: dict[str, ConfigValue | None] = Field(
        default={}, description="the earlier choices under which it is excluded (none: always)"
    )


class EffectiveDimension(Strict):
    name: str
    values: list[ConfigValue] | None
    range: Range | None
    baseline: ConfigValue | None
    when: dict[str, list[ConfigValue]]
    param: str | None = Field(default=None, description="Optuna's name for it; None: `name`")
    contexts: list[dict[str, ConfigValue | None]] | None = Field(
        default=None,
        description="active only where the earlier choices are one of these (None: anywhere)",
    )

    @property
    def parameter(self) -> str:
        return self.param or self.name

    def active(self, config: dict[str, ConfigValue]) -> bool:
        if not all(config.get(name) in allowed for name, allowed in self.when.items()):
            return False
        return self.contexts is None or any(
            all(config.get(k) == v for k, v in context.items()) for context in self.contexts
        )

    def suggest(self, trial: optuna.Trial) -> ConfigValue:
        name = self.parameter
        if self.values is not None:
            value: Any = trial.suggest_categorical(name, self.values)  # type: ignore[arg-type]
            return value
        assert self.range is not None
        r = self.range
        if r.integer:
            step = int(r.step or 1)
            return trial.suggest_int(name, int(r.low), int(r.high), step=step, log=r.log)
        return trial.suggest_float(name, r.low, r.high, step=r.step, log=r.log)


class EffectiveSpace(Strict):
    name: str
    source: str
    hardware_fingerprint: str
    dimensions: list[EffectiveDimension]
    excluded: list[Exclusion]

    def sample(self, trial: optuna.Trial) -> dict[str, ConfigValue]:
        config: dict[str, ConfigValue] = {}
        for dim in self.dimensions:
            if dim.active(config):
                config[dim.name] = dim.suggest(trial)
        return config

    def baseline(self) -> dict[str, ConfigValue]:
        config: dict[str, ConfigValue] = {}
        for dim in self.dimensions:
            if dim.active(config) and dim.baseline is not None:
                config[dim.name] = dim.baseline
        return config

    def choices(self) -> dict[str, list[ConfigValue]]:
        """Each categorical key's values, over all its dimensions (a key the knobs narrow per
        earlier choice has several), in the order they first appear."""
        choices: dict[str, list[ConfigValue]] = {}
        for dim in self.dimensions:
            if dim.values is not None:
                kept = choices.setdefault(dim.name, [])
                kept.extend(v for v in dim.values if v not in kept)
        return choices

    def produces(self, config: dict[str, ConfigValue]) -> bool:
        """Whether sampling this space can give exactly `config`: every active dimension has
        its key with a value inside its distribution, and there is no other key."""
        try:
            produced, trial = self._sampled_as(config)
        except ValueError:  # a key the space needs is missing, or a value is not a choice
            return False
        return produced == config and all(
            optuna_api.contains(dist, trial.params[name])
            for name, dist in trial.distributions.items()
        )

    def distributions_of(self, config: dict[str, ConfigValue]) -> dict[str, Any]:
        """The distribution of each of `config`'s dimensions, as sampling this space declares
        them."""
        return dict(self._sampled_as(config)[1].distributions)

    def _sampled_as(
        self, config: dict[str, ConfigValue]
    ) -> tuple[dict[str, ConfigValue], optuna.trial.FixedTrial]:
        """This space sampled with `config`'s values fixed: what it gives, and the trial that
        holds each dimension's distribution. Out-of-range values are not refused here."""
        import optuna

        trial = optuna.trial.FixedTrial(self.params_of(config))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FixedTrial warns of an out-of-range value
            return self.sample(trial), trial  # type: ignore[arg-type]

    def params_of(self, config: dict[str, ConfigValue]) -> dict[str, ConfigValue]:
        """`config` under the Optuna parameter names that sampling it would use."""
        params: dict[str, ConfigValue] = {}
        partial: dict[str, ConfigValue] = {}
        for dim in self.dimensions:
            if dim.name in config and dim.name not in partial and dim.active(partial):
                partial[dim.name] = config[dim.name]
                params[dim.parameter] = config[dim.name]
        for key, value in config.items():  # keys the space does not sample stay as they are
            if key not in partial:
                params[key] = value
        return params


def resolve_space_path(name: str | None) -> Path:
    """A path as given, else a file of that name in ./search_spaces or the bundled ones."""
    candidate = Path(name or DEFAULT_SPACE)
    for path in (candidate, Path("search_spaces") / candidate, SPACES_DIR / candidate):
        if path.is_file():
            return path
    raise SpaceError("search_space", "must name an existing space file", name)


def load_space(path: Path) -> SpaceFile:
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpaceError("search_space", f"must be valid YAML ({exc})", str(path)) from None
    try:
        return SpaceFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        rule = first["msg"].removeprefix("Value error, ")
        raise SpaceError(f"{path.name}: {loc}", rule, first.get("input")) from None


def effective_space(
    space: SpaceFile,
    profile: HardwareProfile,
    source: str,
    model: ModelInfo | None = None,
    cores_per_slot: int | None = None,
    apply_knob_rules: bool = True,
) -> EffectiveSpace:
    """Filter a space by what the hardware (and, when known, the model) supports. Where a
    trial slot has fewer cores than the node (`NodeKind.cpus_per_slot`), thread counts stop
    at the slot's.
    Without `apply_knob_rules` (a replayed table, which says itself what ran) the knobs'
    rules are not applied."""
    caps = profile.capabilities() | _model_capabilities(model)
    kind = model.kind if model is not None else None
    target = Target(frozenset(caps), kind, frozenset(profile.missing_modules))
    dims: list[EffectiveDimension] = []
    excluded: list[Exclusion] = []
    for dim in space.dimensions:
        unmet = target.unmet(dim.requires) or _never_active(dim, dims)
        if unmet is not None:
            excluded.append(Exclusion(dimension=dim.name, value=None, reason=unmet))
            continue
        effective = _filter_dimension(dim, profile, model, target, excluded, cores_per_slot)
        if effective is None:
            continue
        if not apply_knob_rules:
            dims.append(effective)
            continue
        split, dropped = knob_rules.split(effective, dims, target)
        dims.extend(split)
        excluded.extend(Exclusion.model_validate(d) for d in dropped)
    return EffectiveSpace(
        name=space.name,
        source=source,
        hardware_fingerprint=profile.fingerprint,
        dimensions=dims,
        excluded=excluded,
    )


def _never_active(dim: Dimension, earlier: list[EffectiveDimension]) -> str | None:
    """Why `dim` can never be sampled: an earlier dimension its `when` names keeps none of
    the values it waits for (OpenVINO's options where the node has no OpenVINO), or None."""
    for name, awaited in dim.when.items():
        offered = [d for d in earlier if d.name == name]
        if any(d.values is None for d in offered):
            continue  # a range: `when` lists values, which a range may take
        if not any(value in awaited for d in offered for value in d.values or []):
            wanted = " or ".join(str(value) for value in awaited)
            return f"active only when {name} is {wanted}, which is not offered here"
    return None


def _filter_dimension(
    dim: Dimension,
    profile: HardwareProfile,
    model: ModelInfo | None,
    target: Target,
    excluded: list[Exclusion],
    cores_per_slot: int | None,
) -> EffectiveDimension | None:
    if dim.name == BATCH_KEY and model is not None and model.fixed_batch is not None:
        fixed_by = _FIXED_BY[model.fixed_batch_by or "inputs"]
        return _fixed_batch_dimension(dim, model.fixed_batch, fixed_by, excluded)
    limit = LIMITS[dim.at_most](profile, model) if dim.at_most else None
    if dim.at_most == "cpu_cores" and limit is not None and cores_per_slot is not None:
        limit = max(1, min(limit, cores_per_slot))
    values = dim.values
    if values is not None:
        kept = []
        for value in values:
            reason = _value_exclusion(dim, value, target, limit) or _refusal(dim, value, model)
            if reason is None:
                kept.append(value)
            else:
                excluded.append(Exclusion(dimension=dim.name, value=value, reason=reason))
        if not kept:
            return None
        values = kept
    baseline = _baseline(dim, values)
    return EffectiveDimension(
        name=dim.name, values=values, range=dim.range, baseline=baseline, when=dim.when
    )


# What fixes a model's batch size, in words, by `ModelInfo.fixed_batch_by`.
_FIXED_BY = {
    "request": "the request's model.fixed_batch",
    "inputs": "its inputs fix the batch dimension",
}


def _fixed_batch_dimension(
    dim: Dimension, batch: int, fixed_by: str, excluded: list[Exclusion]
) -> EffectiveDimension:
    """The batch size of a model that takes one alone (its inputs or the request fix it):
    that size alone, whatever the file lists (the memory limit included: the model runs at no
    other), under its own Optuna parameter name where the file offers more (a study begun on
    the file's sizes resumes)."""
    reason = f"the model takes only batches of {batch} ({fixed_by})"
    for value in dim.values or []:
        if value != batch:
            excluded.append(Exclusion(dimension=dim.name, value=value, reason=reason))
    param = None if dim.values == [batch] else knob_rules.parameter_name(dim.name, [batch])
    return EffectiveDimension(
        name=dim.name, values=[batch], range=None, baseline=batch, when=dim.when, param=param
    )


def _value_exclusion(
    dim: Dimension, value: ConfigValue, target: Target, limit: int | None
) -> str | None:
    unmet = target.unmet(dim.value_requires.get(str(value), []))
    if unmet is not None:
        return unmet
    if limit is not None and isinstance(value, int | float) and value > limit:
        return f"exceeds {dim.at_most} = {limit}"
    return None


def _refusal(dim: Dimension, value: ConfigValue, model: ModelInfo | None) -> str | None:
    """Why the inspection found that this engine cannot convert the model, if it did."""
    if model is None or dim.name != ENGINE_KEY:
        return None
    return model.engine_refusals.get(str(value))


def _baseline(dim: Dimension, values: list[ConfigValue] | None) -> ConfigValue | None:
    """The first preferred baseline that is left; else the first value left."""
    for preferred in dim.baseline_preferences():
        if preferred == "max":
            pool: list[Any] = values if values is not None else [dim.range.high]  # type: ignore[union-attr]
            return max(pool)
        if values is None or preferred in values:
            return preferred
    return values[0] if values and dim.baseline is not None else None


def _model_capabilities(model: ModelInfo | None) -> set[str]:
    if model is None:  # planning without a model: keep what any model could use
        return set(MODEL_CAPABILITIES)
    return {f"model.{model.kind}"}
