"""The result store on an Optuna study: SQLite or PostgreSQL through Optuna's RDB storage, or
Optuna's in-memory storage (fast tests, one process). This is the only module that reads or
writes a study's attributes; everything it stores has a type in `autotune.results.records`.

Each trial costs two transactions: a trial the strategy proposed is created running with its
parameters, marks and owner in one; its ending, constraints, values and state are another
(`optuna_api` writes the rows Optuna's RDB storage would). A SQLite study runs in WAL mode
with `synchronous=NORMAL`: a commit does not wait for the disk, and the database stays
consistent when the process dies.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

from autotune import optuna_api
from autotune.core.contract import ConfigValue
from autotune.core.contract.trials import SensitivityTable
from autotune.core.errors import RequestError
from autotune.core.metrics import OBJECTIVES
from autotune.results.databases import fast_sqlite, require_existing
from autotune.results.leases import Owner, lock_engine, owner_is_dead, schema_lock, study_lock
from autotune.results.records import (
    RECORD_KEY,
    Census,
    StoredRevalidation,
    StudyIdentity,
    TrialEnding,
    TrialMarks,
    TrialRecord,
    TrialState,
    each_configuration_once,
)
from autotune.results.sensitivities import sensitivities_in, sensitivity_key
from autotune.space.knob_rules import parameter_key

if TYPE_CHECKING:
    import optuna

    from autotune.space.search_space import EffectiveSpace

# How long storage calls keep retrying while the database is unreachable.
DATABASE_PATIENCE_S = 120.0
MARKS_KEY = "marks"
OWNER_PREFIX = "autotune:owner:"
TRIAL_OWNER_KEY = "autotune:owner"
REVALIDATION_KEY = "revalidation"
REVALIDATION_STATE_KEY = "revalidation_state"
# What an Optuna storage holds, and without which reading it would write to it first.
OPTUNA_TABLES = frozenset({"studies", "version_info", "alembic_version"})

T = TypeVar("T")


def retrying(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Storage calls survive a database restart: retry connection errors with backoff."""
    import sqlalchemy.exc
    from optuna.exceptions import StorageInternalError

    delay = 0.5
    deadline = time.monotonic() + DATABASE_PATIENCE_S
    while True:
        try:
            return call(*args, **kwargs)
        except (
            sqlalchemy.exc.OperationalError,
            sqlalchemy.exc.InterfaceError,
            StorageInternalError,
        ):
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


def rdb_storage(url: str, create: bool = True) -> Any:
    """Optuna's storage at `url`; the caller disposes of its engine. Creating it creates
    Optuna's tables in a new database, which coordinators starting together must not race."""
    import optuna

    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if not url.startswith("sqlite"):
        engine_kwargs.update(pool_size=5, max_overflow=5)
    with schema_lock(url):
        storage = optuna.storages.RDBStorage(
            url, engine_kwargs=engine_kwargs, skip_table_creation=not create
        )
    if url.startswith("sqlite"):
        fast_sqlite(storage.engine)
    return storage


class OptunaStore:
    """A study's trials as typed records, over an Optuna study."""

    def __init__(self, study: optuna.Study, storage_url: str | None, engine: Any = None) -> None:
        """`engine`: the database engine under the study's storage, closed by `close`."""
        self.study = study
        self.storage_url = storage_url
        self._engine = engine
        self._lock_engine = None if storage_url is None else lock_engine(storage_url)
        self._trial_ids: dict[int, int] = {}  # our running trials' storage ids, by number
        self._distributions: dict[str, Any] = {}  # each parameter's, as the study holds it

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def location(self) -> str:
        """Where the study is kept: its storage URL, or 'memory'."""
        return self.storage_url or "memory"

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        study_name: str,
        storage_url: str | None,
        directions: Sequence[str],
        sampler: Any,
        identity: StudyIdentity,
    ) -> OptunaStore:
        """The study, created or resumed; a resume must tune the same `identity`. With no
        `storage_url` the study lives in memory."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage: Any = optuna.storages.InMemoryStorage()
        if storage_url is not None:
            storage = rdb_storage(storage_url)
        study = optuna.create_study(
            storage=storage,
            study_name=study_name,
            directions=list(directions),  # type: ignore[arg-type]
            sampler=sampler,
            load_if_exists=True,
        )
        store = cls(study, storage_url, getattr(storage, "engine", None))
        with store.locked():
            store._check_identity(identity)
        return store

    def _check_identity(self, identity: StudyIdentity) -> None:
        wanted = identity.model_dump()
        stored = {k: self.study.user_attrs.get(k) for k in wanted}
        if all(v is None for v in stored.values()):
            for key, value in wanted.items():
                self.study.set_user_attr(key, value)
            # what optuna-dashboard and trials_dataframe call the objectives (a stable API
            # that Optuna still marks experimental)
            from optuna.exceptions import ExperimentalWarning

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                self.study.set_metric_names([OBJECTIVES[o].name for o in identity.objectives])
        elif stored != wanted:
            changed = sorted(k for k in wanted if stored[k] != wanted[k])
            raise RequestError(
                "study",
                f"exists with a different {', '.join(changed)}; resume only the same tuning "
                "or choose another study name",
                self.name,
            )

    def close(self) -> None:
        """Closes the connections this store opened (a runner process runs many jobs)."""
        for engine in (self._engine, self._lock_engine):
            if engine is not None:
                engine.dispose()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serializes check-then-act among coordinators sharing this study."""
        lock = (
            nullcontext()
            if self.storage_url is None
            else study_lock(self.storage_url, self.name, self._lock_engine)
        )
        with lock:
            yield

    # -- reading ---------------------------------------------------------------------------

    def records(self, states: Sequence[TrialState] | None = None) -> list[TrialRecord]:
        wanted = None if states is None else _states(*states)
        trials = retrying(self.study.get_trials, deepcopy=False, states=wanted)
        return [record_of(t) for t in trials]

    def completed(self) -> list[TrialRecord]:
        """The trials that ended with metrics, each configuration once
        (`each_configuration_once`): a repeat answered from a trial is not among them."""
        return each_configuration_once(self.records(("complete",)))

    def waiting(self) -> list[TrialRecord]:
        """Trials enqueued and not yet asked."""
        return self.census().waiting

    def used(self) -> int:
        """Counted trials and those running now."""
        return self.census().used

    def census(self) -> Census:
        """The waiting trials and the number of trials used: one count of the study's trials
        by state, and a read of the waiting ones where there are any."""
        counts = retrying(optuna_api.trial_state_counts, self.study)
        used = sum(counts.get(_OPTUNA_NAMES[s], 0) for s in ("complete", "pruned", "running"))
        waiting = self.records(("waiting",)) if counts.get(_OPTUNA_NAMES["waiting"]) else []
        return Census(waiting=waiting, used=used)

    def counted(self) -> int:
        """Trials that count toward the budget: measured, or ended by their candidate (counted
        without reading their records)."""
        states = _states("complete", "pruned")
        return len(retrying(self.study.get_trials, deepcopy=False, states=states))

    def objective_names(self) -> list[str]:
        return list(retrying(lambda: self.study.user_attrs).get("objectives", []))

    def revalidation(self) -> StoredRevalidation | None:
        attrs = retrying(lambda: self.study.user_attrs)
        report, state = attrs.get(REVALIDATION_KEY), attrs.get(REVALIDATION_STATE_KEY)
        if report is None or state is None:
            return None
        return StoredRevalidation(report=report, **state)

    def revalidation_report(self) -> dict[str, Any] | None:
        report: dict[str, Any] | None = retrying(lambda: self.study.user_attrs).get(
            REVALIDATION_KEY
        )
        return report

    def sensitivities(self) -> list[SensitivityTable]:
        return sensitivities_in(retrying(lambda: self.study.user_attrs))

    # -- writing ---------------------------------------------------------------------------

    def enqueue(
        self, space: EffectiveSpace, config: dict[str, ConfigValue], marks: TrialMarks
    ) -> None:
        params = space.params_of(config)
        retrying(self.study.enqueue_trial, params, user_attrs={MARKS_KEY: _dump(marks)})

    def ask(self, space: EffectiveSpace, owner: Owner, waiting: bool) -> TrialRecord:
        """A trial the sampler proposes, or with `waiting` (some trial waits) the next waiting
        one; claimed by `owner`. Where the sampler allows, the proposal is sampled in memory
        and stored in one write."""
        sampler = self.study.sampler
        if not waiting and optuna_api.samples_in_memory(sampler):
            sampling = optuna_api.SamplingTrial(self.study)
            config = retrying(space.sample, sampling)
            frozen = sampling.frozen
            return self._create(config, frozen.params, frozen.distributions, TrialMarks(), owner)
        trial = retrying(self.study.ask)
        config = retrying(space.sample, trial)
        storage = optuna_api.storage_of(self.study)
        trial_id = optuna_api.trial_id(trial)
        retrying(storage.set_trial_system_attr, trial_id, TRIAL_OWNER_KEY, owner.id)
        self._trial_ids[trial.number] = trial_id
        marks = _marks(trial.user_attrs)
        return TrialRecord(
            number=trial.number, state="running", config=config, marks=marks, attempt=marks.attempt
        )

    def create(
        self,
        space: EffectiveSpace,
        config: dict[str, ConfigValue],
        marks: TrialMarks,
        owner: Owner,
    ) -> TrialRecord:
        """A running trial of `config` (which `space` can produce), in one write."""
        params = space.params_of(config)
        return self._create(config, params, space.distributions_of(config), marks, owner)

    def _create(
        self,
        config: dict[str, ConfigValue],
        params: dict[str, ConfigValue],
        dists: dict[str, Any],
        marks: TrialMarks,
        owner: Owner,
    ) -> TrialRecord:
        created, number = retrying(
            optuna_api.create_running_trial,
            self.study,
            dict(params),
            dists,
            {MARKS_KEY: _dump(marks)},
            {TRIAL_OWNER_KEY: owner.id},
            self._distributions,
        )
        self._trial_ids[number] = created
        return TrialRecord(
            number=number,
            state="running",
            config=dict(config),
            marks=marks,
            attempt=marks.attempt,
        )

    def tell(self, number: int, ending: TrialEnding, values: list[float] | None) -> None:
        """The trial's ending; `values` (the objectives) when it has metrics, in one write.
        Safe to repeat (after a lost connection, or once another coordinator told it): a trial
        that ended is left as it is."""
        retrying(self._tell, number, ending, values)
        self._trial_ids.pop(number, None)

    def _tell(self, number: int, ending: TrialEnding, values: list[float] | None) -> None:
        trial_id = self._trial_ids.get(number)
        if trial_id is None:  # another coordinator's trial, reaped
            storage = optuna_api.storage_of(self.study)
            trial_id = storage.get_trial_id_from_study_id_trial_number(
                optuna_api.study_id(self.study), number
            )
        measured = values is not None and ending.violations is not None
        optuna_api.finish_trial(
            self.study,
            trial_id,
            values if measured else None,
            ending.failed,
            {RECORD_KEY: _dump(ending)},
            optuna_api.constraint_attrs(ending.violations or {}) if measured else {},
        )

    def save_revalidation(self, stored: StoredRevalidation) -> None:
        retrying(self.study.set_user_attr, REVALIDATION_KEY, stored.report)
        state = stored.model_dump(mode="json", exclude={"report"})
        retrying(self.study.set_user_attr, REVALIDATION_STATE_KEY, state)

    def save_sensitivity(self, table: SensitivityTable) -> None:
        """Kept once per model and mode: a table already stored is not written again."""
        key = sensitivity_key(table)
        if key not in retrying(lambda: self.study.user_attrs):
            retrying(self.study.set_user_attr, key, table.model_dump(mode="json"))

    # -- leases ----------------------------------------------------------------------------

    def beat(self, owner: Owner) -> None:
        """This coordinator is alive: its owner record, with the time."""
        storage = optuna_api.storage_of(self.study)
        storage.set_study_system_attr(
            optuna_api.study_id(self.study), OWNER_PREFIX + owner.id, owner.record()
        )

    def lost(self, stale_after_s: float) -> list[TrialRecord]:
        """Running trials whose coordinator is dead."""
        storage = optuna_api.storage_of(self.study)
        attrs = retrying(storage.get_study_system_attrs, optuna_api.study_id(self.study))
        owners = {
            k.removeprefix(OWNER_PREFIX): v for k, v in attrs.items() if k.startswith(OWNER_PREFIX)
        }
        running = retrying(self.study.get_trials, deepcopy=False, states=_states("running"))
        lost = []
        for trial in running:
            owner = owners.get(trial.system_attrs.get(TRIAL_OWNER_KEY, ""))
            if owner_is_dead(owner, stale_after_s):
                in_process = bool(owner is not None and owner.get("in_process"))
                lost.append(record_of(trial).model_copy(update={"died_in_process": in_process}))
        return lost


@contextmanager
def opened_store(
    study_name: str, storage: str, field: str, storage_field: str = "storage"
) -> Iterator[OptunaStore]:
    """A stored study to read, its connections closed on exit (a long-lived service reads
    many studies). A name the storage does not hold is a bad `field`; a storage that does
    not exist is a bad `storage_field`, and reading never creates or migrates one."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    require_existing(storage, storage_field, OPTUNA_TABLES, "autotune's studies")
    rdb = rdb_storage(storage, create=False)
    try:
        study = optuna.load_study(study_name=study_name, storage=rdb)
    except KeyError:
        rdb.engine.dispose()
        raise RequestError(
            field, "must name an existing study in the storage", study_name
        ) from None
    store = OptunaStore(study, storage, rdb.engine)
    try:
        yield store
    finally:
        store.close()


def record_of(trial: optuna.trial.FrozenTrial) -> TrialRecord:
    """The typed record of a stored trial; a study written before records were typed keeps
    each field in an attribute of its own, and reads the same."""
    attrs = trial.user_attrs
    marks = _marks(attrs)
    stored = attrs.get(RECORD_KEY)
    ending = TrialEnding.model_validate(stored) if stored is not None else _old_ending(attrs)
    state = _STATE_NAMES[trial.state.name]
    params = trial.system_attrs.get("fixed_params", {}) if state == "waiting" else trial.params
    config = {parameter_key(name): value for name, value in params.items()}
    record = TrialRecord(
        number=trial.number,
        state=state,
        config=config,
        marks=marks,
        attempt=marks.attempt,
        violations=dict(trial.constraints),
        values=trial.values,
        ended_at=trial.datetime_complete,
        owner=trial.system_attrs.get(TRIAL_OWNER_KEY),
    )
    return record if ending is None else record.with_ending(ending)


def _marks(attrs: dict[str, Any]) -> TrialMarks:
    return TrialMarks.model_validate(attrs[MARKS_KEY]) if MARKS_KEY in attrs else _old_marks(attrs)


def _old_marks(attrs: dict[str, Any]) -> TrialMarks:
    return TrialMarks(
        baseline=bool(attrs.get("baseline", False)),
        attempt=int(attrs.get("attempt", 0)),
        retry_of=attrs.get("retry_of"),
        proposed=attrs.get("proposed"),
        warm_start=attrs.get("warm_start"),
    )


def _old_ending(attrs: dict[str, Any]) -> TrialEnding | None:
    if "status" not in attrs or "config" not in attrs:
        return None
    return TrialEnding(
        config=attrs["config"],
        attempt=int(attrs.get("attempt", 0)),
        status=attrs["status"],
        variant_key=attrs.get("variant_key", ""),
        reason=attrs.get("reason"),
        metrics=attrs.get("metrics"),
        provenance=attrs.get("provenance"),
        reused_from=attrs.get("reused_from"),
        measured=bool(attrs.get("measured", True)),
    )


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_defaults=True)
    return dumped


# Each of our trial states, as Optuna names it.
_OPTUNA_NAMES: dict[TrialState, str] = {
    "waiting": "WAITING",
    "running": "RUNNING",
    "complete": "COMPLETE",
    "pruned": "PRUNED",
    "failed": "FAIL",
}
_STATE_NAMES: dict[str, TrialState] = {theirs: ours for ours, theirs in _OPTUNA_NAMES.items()}


def _states(*names: TrialState) -> tuple[Any, ...]:
    from optuna.trial import TrialState as OptunaState

    return tuple(OptunaState[_OPTUNA_NAMES[n]] for n in names)
