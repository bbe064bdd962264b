"""Every use of Optuna's private API, in one place: an Optuna upgrade that moves one of
these breaks this module's tests, and nothing else. The tables it writes rows into are pinned
by `tests/unit/autotune/test_optuna_private_schema.py`, which names what an upgrade moved."""

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


def constraint_attrs(violations: dict[str, float]) -> dict[str, list[float]]:
    """The trial system attribute Optuna's samplers, `Study.best_trials` and plots, and
    optuna-dashboard all read a trial's constraints from: their values (<= 0 when met) in a
    list, in the order of their names. (Optuna's named form, `constraints:NAME`, is one that
    optuna-dashboard does not read: its plots took infeasible trials for feasible ones.)
    The names stay in the trial's record."""
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

    return {_CONSTRAINTS_KEY: [float(violations[name]) for name in sorted(violations)]}


def create_running_trial(
    study: optuna.Study,
    params: dict[str, Any],
    distributions: dict[str, Any],
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
    known: dict[str, Any],
) -> tuple[int, int]:
    """Stores a running trial with its parameters and attributes in one transaction, and
    returns its storage id and number. Optuna's RDB storage runs a few queries per parameter
    and reads the trial back; this writes the rows it would write, with the checks it makes:
    the study row is locked while the trial is numbered, and each parameter's distribution must
    be compatible with the one the study holds for that name (`known` remembers those)."""
    import optuna
    from optuna.trial import TrialState

    backend = _rdb_backend(study)
    _check_distributions(study, backend, distributions, known)
    if backend is None:
        template = optuna.trial.create_trial(
            state=TrialState.RUNNING,
            params=dict(params),
            distributions=distributions,
            user_attrs=user_attrs,
            system_attrs=system_attrs,
        )
        storage = study._storage
        trial_id = storage.create_new_trial(study._study_id, template)
        return trial_id, storage.get_trial_number_from_id(trial_id)
    return _insert_running_trial(
        backend, study._study_id, params, distributions, user_attrs, system_attrs
    )


def finish_trial(
    study: optuna.Study,
    trial_id: int,
    values: Sequence[float] | None,
    failed: bool,
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
) -> bool:
    """Ends a running trial in one transaction: its attributes, its `values` (complete; NaN
    among them fails it, as `Study.tell` does) or, without values, failed or pruned. The
    sampler's `after_trial` runs first, as in `Study.tell`. False, writing nothing, when the
    trial had ended already."""
    import math

    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    if values is not None and any(math.isnan(v) for v in values):
        values, failed = None, True
    state = TrialState.COMPLETE if values is not None else (
        TrialState.FAIL if failed else TrialState.PRUNED
    )  # fmt: skip
    storage = study._storage
    if not _after_trial_is_empty(study.sampler):
        trial = storage.get_trial(trial_id)
        if trial.state.is_finished():
            return False
        study.sampler.after_trial(study, trial, state, values)
    backend = _rdb_backend(study)
    if backend is not None:
        return _update_finished_trial(backend, trial_id, state, values, user_attrs, system_attrs)
    try:
        for key, value in user_attrs.items():
            storage.set_trial_user_attr(trial_id, key, value)
    except UpdateFinishedTrialError:
        return False
    for key, value in system_attrs.items():
        storage.set_trial_system_attr(trial_id, key, value)
    return bool(storage.set_trial_state_values(trial_id, state, values))


def trial_state_counts(study: optuna.Study) -> dict[str, int]:
    """How many of the study's trials are in each state, by Optuna's state name; on an RDB
    storage one query, where reading the trials would load each unfinished one whole."""
    backend = _rdb_backend(study)
    if backend is None:
        counts: dict[str, int] = {}
        for trial in study._storage.get_all_trials(study._study_id, deepcopy=False):
            counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
        return counts
    import sqlalchemy as sa
    from optuna.storages._rdb import models

    trials = models.TrialModel.__table__
    with backend.engine.connect() as connection:
        rows = connection.execute(
            sa.select(trials.c.state, sa.func.count())
            .where(trials.c.study_id == study._study_id)
            .group_by(trials.c.state)
        ).all()
    return {state.name: int(n) for state, n in rows}


def _rdb_backend(study: optuna.Study) -> Any:
    """The RDB storage under `study` (Optuna wraps it in a cache), or None in memory."""
    from optuna.storages import RDBStorage

    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, RDBStorage) else None


def _after_trial_is_empty(sampler: Any) -> bool:
    """Whether `sampler.after_trial` does nothing: Optuna's samplers without the deprecated
    `constraints_func` (constraints reach them through the trial's system attributes)."""
    import optuna
    from optuna.samplers.nsgaii._after_trial_strategy import NSGAIIAfterTrialStrategy

    samplers = optuna.samplers
    if type(sampler) is samplers.RandomSampler:
        return True
    if type(sampler) in (samplers.TPESampler, samplers.GPSampler):
        return sampler._constraints_func is None
    if type(sampler) is samplers.NSGAIISampler:
        strategy = sampler._after_trial_strategy
        return type(strategy) is NSGAIIAfterTrialStrategy and strategy._constraints_func is None
    return False


def _check_distributions(
    study: optuna.Study, backend: Any, distributions: dict[str, Any], known: dict[str, Any]
) -> None:
    """Each parameter's distribution must be compatible with the one the study holds for its
    name, as Optuna requires; `known` keeps those read, so each name is read once."""
    from optuna.distributions import check_distribution_compatibility

    for name, distribution in distributions.items():
        if name not in known:
            stored = _stored_distribution(study, backend, name)
            known[name] = distribution if stored is None else stored
        check_distribution_compatibility(known[name], distribution)


def _stored_distribution(study: optuna.Study, backend: Any, name: str) -> Any:
    if backend is None:
        trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
        return next((t.distributions[name] for t in trials if name in t.distributions), None)
    import sqlalchemy as sa
    from optuna.distributions import json_to_distribution
    from optuna.storages._rdb import models

    trials, params = models.TrialModel.__table__, models.TrialParamModel.__table__
    with backend.engine.connect() as connection:
        stored = connection.execute(
            sa.select(params.c.distribution_json)
            .join(trials, trials.c.trial_id == params.c.trial_id)
            .where(trials.c.study_id == study._study_id, params.c.param_name == name)
            .limit(1)
        ).scalar()
    return None if stored is None else json_to_distribution(stored)


def _insert_running_trial(
    backend: Any,
    study_id: int,
    params: dict[str, Any],
    distributions: dict[str, Any],
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
) -> tuple[int, int]:
    import datetime

    import sqlalchemy as sa
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models
    from optuna.trial import TrialState

    trials, params_table = models.TrialModel.__table__, models.TrialParamModel.__table__
    with backend.engine.begin() as connection:
        studies = models.StudyModel.__table__
        connection.execute(
            sa.select(studies.c.study_id).where(studies.c.study_id == study_id).with_for_update()
        )
        trial_id = connection.execute(
            trials.insert().values(
                study_id=study_id,
                number=None,
                state=TrialState.RUNNING,
                datetime_start=datetime.datetime.now(),
            )
        ).inserted_primary_key[0]
        number = connection.execute(
            sa.select(sa.func.count(trials.c.trial_id)).where(
                trials.c.study_id == study_id, trials.c.trial_id < trial_id
            )
        ).scalar_one()
        connection.execute(
            trials.update().where(trials.c.trial_id == trial_id).values(number=number)
        )
        if params:
            connection.execute(params_table.insert(), [
                {
                    "trial_id": trial_id,
                    "param_name": name,
                    "param_value": distributions[name].to_internal_repr(value),
                    "distribution_json": distribution_to_json(distributions[name]),
                }
                for name, value in params.items()
            ])  # fmt: skip
        _insert_attrs(connection, models.TrialUserAttributeModel, trial_id, user_attrs)
        _insert_attrs(connection, models.TrialSystemAttributeModel, trial_id, system_attrs)
    return int(trial_id), int(number)


def _update_finished_trial(
    backend: Any,
    trial_id: int,
    state: Any,
    values: Sequence[float] | None,
    user_attrs: dict[str, Any],
    system_attrs: dict[str, Any],
) -> bool:
    import datetime

    from optuna.storages._rdb import models
    from optuna.trial import TrialState

    trials = models.TrialModel.__table__
    with backend.engine.begin() as connection:
        ended = connection.execute(
            trials.update()
            .where(trials.c.trial_id == trial_id, trials.c.state == TrialState.RUNNING)
            .values(state=state, datetime_complete=datetime.datetime.now())
        )
        if ended.rowcount != 1:
            return False  # told already: the transaction writes nothing
        if values is not None:
            rows = []
            for objective, value in enumerate(values):
                stored, kind = models.TrialValueModel.value_to_stored_repr(float(value))
                rows.append(
                    {"trial_id": trial_id, "objective": objective, "value": stored,
                     "value_type": kind}
                )  # fmt: skip
            connection.execute(models.TrialValueModel.__table__.insert(), rows)
        _upsert_attrs(connection, models.TrialUserAttributeModel, trial_id, user_attrs)
        _upsert_attrs(connection, models.TrialSystemAttributeModel, trial_id, system_attrs)
    return True


def _insert_attrs(connection: Any, model: Any, trial_id: int, attrs: dict[str, Any]) -> None:
    import json

    if attrs:
        connection.execute(
            model.__table__.insert(),
            [
                {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                for k, v in attrs.items()
            ],
        )


def _upsert_attrs(connection: Any, model: Any, trial_id: int, attrs: dict[str, Any]) -> None:
    """Attributes the trial may hold already (a constraint set twice) are replaced."""
    table = model.__table__
    if attrs:
        connection.execute(
            table.delete().where(table.c.trial_id == trial_id, table.c.key.in_(list(attrs)))
        )
    _insert_attrs(connection, model, trial_id, attrs)


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
