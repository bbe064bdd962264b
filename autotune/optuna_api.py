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


def count_trials(study: optuna.Study, states: Sequence[Any]) -> int:
    """Trials in `states`, counted by the database rather than by loading them."""
    return int(study._storage.get_n_trials(study._study_id, tuple(states)))


def contains(distribution: Any, value: Any) -> bool:
    """Whether `value` lies inside `distribution` (a choice of it, or in its range and step)."""
    return bool(distribution._contains(distribution.to_internal_repr(value)))


def compute_hypervolume(points: Any, reference: Any) -> float:
    from optuna._hypervolume import compute_hypervolume as hv  # Optuna's own samplers use it

    return float(hv(points, reference))
