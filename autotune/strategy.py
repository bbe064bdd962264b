"""autotune's own search strategy: what it knows about its space, spent on fewer measurements.

- A designed initial set follows the baseline: each precision on each engine at a middle batch
  size, everything else as the baseline runs. It tells early which model variants keep their
  accuracy and which kernels are fast.
- Then a Pareto local search: the unmeasured neighbours (one dimension changed) of the
  feasible front found so far, the point with the largest hypervolume contribution first;
  nearest first (one step along a numeric dimension before two), and at each step
  throughput dimensions (batch size, threads) before the other kernel choices, and those
  before the model variant. Every few proposals, and whenever the front has no unmeasured
  neighbour left, the sampler proposes.
- A proposal that repeats a finished configuration is told from that trial without being
  measured; one that repeats a configuration still being measured waits for that measurement.
- A configuration whose model variant already violates `max_accuracy_drop` is not measured:
  accuracy depends only on the variant. Nor is one that differs only in throughput dimensions
  from a configuration that could not be built: batch size and threads do not decide that.
- The sampler is multivariate TPE for mixed categorical spaces, with a constant liar so that
  several slots do not propose the same point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.contract import (
    ConfigValue,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    variant_key,
)

if TYPE_CHECKING:
    import optuna

    from autotune.space import EffectiveSpace

NAME = "autotune"
# The designed set is the sampler's startup; TPE models from this many trials on.
STARTUP_TRIALS = 4
# After the designed set, every this-many-th proposal is the sampler's, the rest are neighbours.
SAMPLER_EVERY = 4
# They change how fast a configuration runs, never whether it can be built.
THROUGHPUT_DIMENSIONS = ("batch.size", "runtime.threads")
ACCURACY_VIOLATION = "its variant violates the accuracy constraint"
UNSUPPORTED_LIKE = "differs only in batch size or threads from unsupported trial"

ConfigKey = tuple[tuple[str, Any], ...]


def config_key(config: dict[str, Any]) -> ConfigKey:
    return tuple(sorted(config.items()))


def make_strategy_sampler(seed: int | None) -> Any:
    import warnings

    import optuna

    with warnings.catch_warnings():
        # `group` is marked experimental; autotune's tests pin the behaviour it relies on.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=STARTUP_TRIALS,
            seed=seed,
        )


def designed_configs(space: EffectiveSpace) -> list[dict[str, ConfigValue]]:
    """Each precision on each engine at the middle batch size, the rest as the baseline runs
    (a dimension that only the change makes active at its own baseline); only configurations
    the space can produce, without the baseline itself."""
    from autotune.warm_start import producible

    baseline = space.baseline()
    choices = {d.name: d.values for d in space.dimensions if d.values is not None}
    middle: dict[str, ConfigValue] = {}
    if "batch.size" in choices:
        batches = sorted(choices["batch.size"], key=_number)
        middle["batch.size"] = batches[len(batches) // 2]
    designed: list[dict[str, ConfigValue]] = []
    for precision in _alternatives(choices, "precision.mode"):
        for engine in _alternatives(choices, "runtime.engine"):
            config = changed(space, baseline, {**middle, **precision, **engine})
            if config != baseline and config not in designed and producible(space, config):
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


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


@dataclass(frozen=True)
class Outcome:
    """What measuring a configuration gave, to answer a repeat of it."""

    trial_number: int
    status: Any
    reason: str | None
    metrics: TrialMetrics | None
    provenance: Provenance | None

    def result_for(self, spec: TrialSpec) -> TrialResult:
        return TrialResult.for_spec(
            spec, self.status, self.reason, 0.0, self.metrics, self.provenance
        )


@dataclass
class Ledger:
    """Per configuration: the trial that answered it, or ours that is measuring it now, and
    the repeats waiting for that one."""

    space: EffectiveSpace
    designed: list[dict[str, ConfigValue]]
    finished: dict[ConfigKey, Outcome] = field(default_factory=dict)
    in_flight: dict[ConfigKey, int] = field(default_factory=dict)
    waiting: dict[int, list[tuple[optuna.Trial, TrialSpec]]] = field(default_factory=dict)
    proposed: set[ConfigKey] = field(default_factory=set)
    unsupported: dict[ConfigKey, Outcome] = field(default_factory=dict)
    _searched: int = 0

    def load(self, study: optuna.Study) -> None:
        """The outcomes a resumed study already holds."""
        from optuna.trial import TrialState

        states = (TrialState.COMPLETE, TrialState.PRUNED)
        for trial in study.get_trials(deepcopy=False, states=states):
            attrs = trial.user_attrs
            if "config" not in attrs or attrs.get("status") in (None, "lost", "skipped"):
                continue
            metrics = attrs.get("metrics")
            provenance = attrs.get("provenance")
            outcome = Outcome(
                trial.number,
                attrs["status"],
                attrs.get("reason"),
                None if metrics is None else TrialMetrics.model_validate(_measured(metrics)),
                None if provenance is None else Provenance.model_validate(provenance),
            )
            self.finished.setdefault(config_key(attrs["config"]), outcome)
            if outcome.status == "unsupported":
                self.unsupported.setdefault(_build_key(attrs["config"]), outcome)

    def settle(self, number: int, spec: TrialSpec, result: TrialResult) -> list[Any]:
        """Record how trial `number` ended; return the repeats that waited for it."""
        key = config_key(spec.config)
        if self.in_flight.get(key) == number:
            del self.in_flight[key]
        if result.status not in ("lost", "skipped"):
            outcome = Outcome(
                number, result.status, result.reason, result.metrics, result.provenance
            )
            self.finished.setdefault(key, outcome)
            if result.status == "unsupported":
                self.unsupported.setdefault(_build_key(spec.config), outcome)
        return self.waiting.pop(number, [])

    def next_proposal(
        self, front: list[dict[str, ConfigValue]], excluded: set[str]
    ) -> tuple[dict[str, ConfigValue], str] | None:
        """The next designed configuration not yet known, else an unknown neighbour of the
        `front` (in the order given) whose variant is not in `excluded`; None when the sampler
        proposes."""
        from autotune.warm_start import producible

        for config in self.designed:
            if not self._known(config_key(config)):
                self.proposed.add(config_key(config))
                return config, "designed"
        self._searched += 1
        if self._searched % SAMPLER_EVERY == 0:
            return None
        for point in front:
            for option in self._neighbours(point):
                key = config_key(option)
                if self._known(key) or variant_key(option) in excluded:
                    continue
                if self.unsupported_like(option) is None and producible(self.space, option):
                    self.proposed.add(key)
                    return option, "neighbour"
        return None

    def unsupported_like(self, config: dict[str, ConfigValue]) -> Outcome | None:
        """A finished trial that could not be built and differs from `config` only in
        throughput dimensions."""
        return self.unsupported.get(_build_key(config))

    def _neighbours(self, config: dict[str, ConfigValue]) -> list[dict[str, ConfigValue]]:
        """Configurations one categorical dimension away (see `changed`), nearest first: a
        numeric value one step along its dimension before two steps, and at each step
        throughput dimensions, then other kernel choices, then the model variant."""
        ranked: list[tuple[tuple[int, int, int], dict[str, ConfigValue]]] = []
        for position, dim in enumerate(self.space.dimensions):
            if dim.name not in config or dim.values is None or config[dim.name] not in dim.values:
                continue
            here = dim.values.index(config[dim.name])
            numeric = all(isinstance(v, int | float) for v in dim.values)
            for index, value in enumerate(dim.values):
                if index != here:
                    step = abs(index - here) if numeric else 1
                    order = (step, _neighbour_class(dim.name), position)
                    ranked.append((order, changed(self.space, config, {dim.name: value})))
        ranked.sort(key=lambda pair: pair[0])
        return [option for _, option in ranked]

    def _known(self, key: ConfigKey) -> bool:
        return key in self.finished or key in self.in_flight or key in self.proposed


def _neighbour_class(name: str) -> int:
    if name in THROUGHPUT_DIMENSIONS:
        return 0
    return 2 if variant_key({name: ""}) else 1


def _build_key(config: dict[str, ConfigValue]) -> ConfigKey:
    return config_key({k: v for k, v in config.items() if k not in THROUGHPUT_DIMENSIONS})


def _measured(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "accuracy_drop"}


def violates_accuracy(
    variant: str, accuracy: dict[str, float], baseline_accuracy: float, bound: float | None
) -> bool:
    known = accuracy.get(variant)
    return bound is not None and known is not None and baseline_accuracy - known > bound
