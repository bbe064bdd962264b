"""autotune's own search strategy: what it knows about its space, spent on fewer measurements.

- A designed initial set follows the baseline: each precision on each engine at a middle batch
  size, everything else as the baseline runs. It tells the sampler early which model variants
  keep their accuracy and which kernels are fast.
- A proposal that repeats a finished configuration is told from that trial without being
  measured; one that repeats a configuration still being measured waits for that measurement.
- A configuration whose model variant already violates `max_accuracy_drop` is not measured:
  accuracy depends only on the variant.
- A repeated proposal means the sampler has settled on a region: the next trial is an
  unmeasured neighbour of the repeated configuration (one dimension changed).
- The sampler is multivariate TPE for mixed categorical spaces, with the designed set as its
  startup and a constant liar so that several slots do not propose the same point.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.contract import ConfigValue, Provenance, TrialMetrics, TrialResult, TrialSpec

if TYPE_CHECKING:
    import optuna

    from autotune.space import EffectiveSpace

NAME = "autotune"
# The designed set is the sampler's startup; TPE models from this many trials on.
STARTUP_TRIALS = 4
ACCURACY_VIOLATION = "its variant violates the accuracy constraint"

ConfigKey = tuple[tuple[str, Any], ...]


def config_key(config: dict[str, Any]) -> ConfigKey:
    return tuple(sorted(config.items()))


def make_strategy_sampler(seed: int | None) -> Any:
    import optuna

    return optuna.samplers.TPESampler(
        multivariate=True,
        group=True,
        constant_liar=True,
        n_startup_trials=STARTUP_TRIALS,
        seed=seed,
    )


def designed_configs(space: EffectiveSpace) -> list[dict[str, ConfigValue]]:
    """Each precision on each engine at the middle batch size, the rest as the baseline runs;
    only configurations the space can produce, without the baseline itself."""
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
            config = {**baseline, **middle, **precision, **engine}
            if config != baseline and config not in designed and producible(space, config):
                designed.append(config)
    return designed


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
    seed: int | None
    designed: list[dict[str, ConfigValue]]
    finished: dict[ConfigKey, Outcome] = field(default_factory=dict)
    in_flight: dict[ConfigKey, int] = field(default_factory=dict)
    waiting: dict[int, list[tuple[optuna.Trial, TrialSpec]]] = field(default_factory=dict)
    proposed: set[ConfigKey] = field(default_factory=set)
    neighbours: list[dict[str, ConfigValue]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

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
            self.finished.setdefault(
                config_key(attrs["config"]),
                Outcome(
                    trial.number,
                    attrs["status"],
                    attrs.get("reason"),
                    None if metrics is None else TrialMetrics.model_validate(_measured(metrics)),
                    None if provenance is None else Provenance.model_validate(provenance),
                ),
            )

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
        return self.waiting.pop(number, [])

    def next_proposal(self) -> tuple[dict[str, ConfigValue], str] | None:
        """A neighbour of a repeat first, else the next designed configuration not yet known;
        None when the sampler proposes."""
        if self.neighbours:
            return self.neighbours.pop(), "neighbour"
        for config in self.designed:
            if not self._known(config_key(config)):
                self.proposed.add(config_key(config))
                return config, "designed"
        return None

    def explore_from(self, config: dict[str, ConfigValue], excluded: set[str]) -> None:
        """Queue an unknown configuration one dimension away from `config` whose variant is
        not in `excluded`, if there is one."""
        from autotune.contract import variant_key
        from autotune.warm_start import producible

        options = [
            {**config, d.name: value}
            for d in self.space.dimensions
            if d.name in config and d.values is not None
            for value in d.values
            if value != config[d.name]
        ]
        self._random.shuffle(options)
        for option in options:
            key = config_key(option)
            if self._known(key) or variant_key(option) in excluded:
                continue
            if producible(self.space, option):
                self.proposed.add(key)
                self.neighbours.append(option)
                return

    def _known(self, key: ConfigKey) -> bool:
        return key in self.finished or key in self.in_flight or key in self.proposed


def _measured(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "accuracy_drop"}


def violates_accuracy(
    variant: str, accuracy: dict[str, float], baseline_accuracy: float, bound: float | None
) -> bool:
    known = accuracy.get(variant)
    return bound is not None and known is not None and baseline_accuracy - known > bound
