"""Every use of Optuna's private API, in one place: an Optuna upgrade that moves one of
these breaks this module's tests, and nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


def storage_of(study: optuna.Study) -> Any:
    return study._storage


def study_id(study: optuna.Study) -> int:
    return int(study._study_id)


def trial_id(trial: optuna.Trial) -> int:
    return int(trial._trial_id)


def contains(distribution: Any, value: Any) -> bool:
    """Whether `value` lies inside `distribution` (a choice of it, or in its range and step)."""
    return bool(distribution._contains(distribution.to_internal_repr(value)))


def compute_hypervolume(points: Any, reference: Any) -> float:
    from optuna._hypervolume import compute_hypervolume as hv  # Optuna's own samplers use it

    return float(hv(points, reference))


def set_constraint(study: optuna.Study, trial_id: int, name: str, value: float) -> None:
    """What `Trial.set_constraint` stores, without its read of the trial first."""
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

    study._storage.set_trial_system_attr(trial_id, f"{_CONSTRAINTS_KEY}:{name}", float(value))


def samples_in_memory(sampler: Any) -> bool:
    """Whether `sampler` can propose a trial before it is stored: it writes nothing to the
    trial while it samples (Optuna's random sampler, and TPE without the constant liar, which
    shares its relative sample through the trial's system attributes)."""
    import optuna

    if type(sampler) is optuna.samplers.RandomSampler:
        return True
    return type(sampler) is optuna.samplers.TPESampler and not sampler._constant_liar


class SamplingTrial:
    """Suggests parameters as `optuna.Trial` does (relative parameters first, then each one
    independently), but only in memory: the trial is stored afterwards in one write, rather
    than one write per parameter. For samplers where `samples_in_memory` holds."""

    def __init__(self, study: optuna.Study) -> None:
        import datetime

        from optuna.trial import FrozenTrial, TrialState

        self.study = study
        self.frozen = FrozenTrial(
            number=-1,  # given when it is stored; samplers use it only to tell trials apart
            state=TrialState.RUNNING,
            value=None,
            values=None,
            datetime_start=datetime.datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={},
            system_attrs={},
            intermediate_values={},
            trial_id=-1,
        )
        study.sampler.before_trial(study, self.frozen)
        self._search_space: dict[str, Any] | None = None
        self._relative: dict[str, Any] | None = None

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        from optuna.distributions import CategoricalDistribution

        return self._suggest(name, CategoricalDistribution(choices))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        from optuna.distributions import IntDistribution

        return int(self._suggest(name, IntDistribution(low, high, log=log, step=step)))

    def suggest_float(
        self, name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> float:
        from optuna.distributions import FloatDistribution

        return float(self._suggest(name, FloatDistribution(low, high, log=log, step=step)))

    def _suggest(self, name: str, distribution: Any) -> Any:
        from optuna.distributions import _get_single_value, check_distribution_compatibility

        if distribution.single():
            value = _get_single_value(distribution)
        else:
            relative = self._relative_params()
            assert self._search_space is not None
            if name in relative and name in self._search_space:
                check_distribution_compatibility(self._search_space[name], distribution)
            if name in relative and contains(distribution, relative[name]):
                value = relative[name]
            else:
                value = self.study.sampler.sample_independent(
                    self.study, self.frozen, name, distribution
                )
        distribution.to_internal_repr(value)  # rejects an invalid value, as Optuna does
        self.frozen.params[name] = value
        self.frozen.distributions[name] = distribution
        return value

    def _relative_params(self) -> dict[str, Any]:
        if self._relative is None:
            sampler = self.study.sampler
            self._search_space = sampler.infer_relative_search_space(self.study, self.frozen)
            self._relative = sampler.sample_relative(self.study, self.frozen, self._search_space)
        return self._relative
