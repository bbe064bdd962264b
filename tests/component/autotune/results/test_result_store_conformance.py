"""What every `ResultStore` backend does alike: `OptunaStore` in memory, on a SQLite file and
(integration) on PostgreSQL. Opening with an identity, waiting and running trials, outcomes
read back as they were told, the budget's counts, the front, the stored head-to-head, leases,
and studies written before trial records were typed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import optuna
import pytest

from autotune.core.contract import ConfigValue, TrialSpec, TrialStatus
from autotune.core.contract.trials import NodeSensitivity, SensitivityTable
from autotune.core.errors import RequestError
from autotune.core.knobs import variant_key
from autotune.results import (
    OptunaStore,
    StoredRevalidation,
    StudyIdentity,
    TrialEnding,
    TrialMarks,
    TrialRecord,
    optuna_store,
)
from autotune.results.leases import Owner
from autotune.search.front import front_of
from tests.conftest import postgres_databases
from tests.coordinator_support import (
    BASELINE,
    WORKLOAD,
    config_with,
    dead_pid,
    scripted_provenance,
    small_space,
    table_metrics,
)

STUDY = "conformance"
OBJECTIVES = ["accuracy", "latency"]
IDENTITY = StudyIdentity(
    model_sha256="a" * 64, objectives=OBJECTIVES, space="small", hardware_fingerprint="test"
)
SPACE = small_space()
EIGHT = config_with(batch__size=8)
SIXTY_FOUR = config_with(batch__size=64)
INT8 = config_with(precision__mode="int8_static")

DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]


@pytest.fixture(scope="module", params=["memory", *DATABASES])
def storage_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str | None]:
    """One database per backend for the module (each test opens a study of its own in it),
    or None: in memory."""
    if request.param == "memory":
        yield None
    else:
        yield from _database(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=DATABASES)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from _database(request.param, tmp_path_factory)


def _database(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store') / 'study.db'}"
    else:
        with postgres_databases(1, prefix="autotune_store") as [url]:
            yield url


@pytest.fixture
def study_name() -> str:
    return f"conformance-{uuid.uuid4().hex[:8]}"


def open_store(url: str | None, study_name: str, identity: StudyIdentity = IDENTITY) -> OptunaStore:
    sampler = optuna.samplers.RandomSampler(seed=0)
    return OptunaStore.open(study_name, url, ["maximize", "minimize"], sampler, identity)


@pytest.fixture(scope="module")
def opened_storages() -> Iterator[dict[str, Any]]:
    storages: dict[str, Any] = {}
    yield storages
    for storage in storages.values():
        storage.engine.dispose()


@pytest.fixture
def store(
    storage_url: str | None,
    study_name: str,
    opened_storages: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OptunaStore]:
    """A new study, opened on one Optuna storage per database for the module: opening a
    storage (Optuna checks its schema) costs more than most tests here. The tests of
    resuming open their own."""
    opened = optuna_store.rdb_storage

    def shared(url: str, create: bool = True) -> Any:
        if url not in opened_storages:
            opened_storages[url] = opened(url, create)
        return opened_storages[url]

    monkeypatch.setattr(optuna_store, "rdb_storage", shared)
    store = open_store(storage_url, study_name)
    monkeypatch.undo()
    yield store
    store.close()


def outcome_of(
    config: dict[str, ConfigValue],
    status: TrialStatus = "ok",
    drop: float = 0.0,
    accuracy: float | None = None,
    **fields: Any,
) -> TrialEnding:
    """An outcome as the coordinator tells it: with status 'ok', the table's metrics (but
    `accuracy` where given) with their accuracy drop, and the violation of an accuracy bound
    of 0.01."""
    metrics = violations = provenance = None
    if status == "ok":
        measured = table_metrics(config).model_dump()
        if accuracy is not None:
            measured["accuracy"] = accuracy
        metrics = {**measured, "accuracy_drop": drop}
        violations = {"max_accuracy_drop": drop - 0.01}
        spec = TrialSpec(study=STUDY, trial_number=0, workload=WORKLOAD, config=config)
        provenance = scripted_provenance(spec)
    return TrialEnding(
        config=config,
        attempt=fields.pop("attempt", 0),
        status=status,
        variant_key=variant_key(config),
        metrics=metrics,
        violations=violations,
        provenance=provenance,
        measured=fields.pop("measured", True),
        **fields,
    )


def values_of(outcome: TrialEnding) -> list[float]:
    assert outcome.metrics is not None
    return [outcome.metrics["accuracy"], outcome.metrics["latency_p95_ms"]]


def told(
    store: OptunaStore, config: dict[str, ConfigValue], outcome: TrialEnding, values: bool = True
) -> TrialRecord:
    """A trial of `config` created and told `outcome`, as the store reads it back."""
    record = store.create(SPACE, config, TrialMarks(), Owner())
    store.tell(record.number, outcome, values_of(outcome) if values else None)
    return store.records()[record.number]


# -- opening -----------------------------------------------------------------------------


def test_a_new_study_is_empty_and_named(
    store: OptunaStore, storage_url: str | None, study_name: str
) -> None:
    assert store.name == study_name
    assert store.location == (storage_url or "memory")
    assert store.records() == [] and store.counted() == store.used() == 0
    assert store.objective_names() == OBJECTIVES
    assert store.revalidation() is None
    # as optuna-dashboard and trials_dataframe name the objectives
    assert store.study.metric_names == ["accuracy", "latency_p95_ms"]


def test_resuming_with_the_same_identity_finds_the_trials(
    database_url: str, study_name: str
) -> None:
    first = open_store(database_url, study_name)
    told(first, EIGHT, outcome_of(EIGHT))
    first.close()
    resumed = open_store(database_url, study_name)
    try:
        assert [r.config for r in resumed.records()] == [EIGHT]
    finally:
        resumed.close()


def test_resuming_with_another_identity_names_the_study(database_url: str, study_name: str) -> None:
    open_store(database_url, study_name).close()
    other = IDENTITY.model_copy(update={"model_sha256": "b" * 64})
    with pytest.raises(RequestError) as raised:
        open_store(database_url, study_name, other)
    assert raised.value.field == "study"
    assert "model_sha256" in raised.value.rule


# -- waiting and running trials ----------------------------------------------------------


def test_ask_pops_the_waiting_trial_with_its_marks(store: OptunaStore) -> None:
    marks = TrialMarks(baseline=True, attempt=1, retry_of=4)
    store.enqueue(SPACE, EIGHT, marks)
    [waiting] = store.waiting()
    assert (waiting.state, waiting.config, waiting.marks) == ("waiting", EIGHT, marks)
    asked = store.ask(SPACE, Owner(), waiting=True)
    assert (asked.number, asked.config, asked.marks, asked.attempt) == (0, EIGHT, marks, 1)
    assert store.waiting() == []
    [running] = store.records(("running",))
    assert (running.config, running.marks) == (EIGHT, marks)


def test_ask_without_waiting_trials_samples_the_space(store: OptunaStore) -> None:
    asked = store.ask(SPACE, Owner(), waiting=False)
    [running] = store.records()
    assert running.state == "running" and running.config == asked.config
    assert running.marks == TrialMarks()


def test_create_makes_a_running_trial_of_the_config(store: OptunaStore) -> None:
    marks = TrialMarks(proposed="neighbour")
    created = store.create(SPACE, INT8, marks, Owner())
    [running] = store.records()
    assert (created.number, created.state) == (running.number, "running")
    assert (running.config, running.marks, running.status) == (INT8, marks, None)
    assert store.waiting() == []
    assert store.used() == 1 and store.counted() == 0


# -- outcomes ----------------------------------------------------------------------------


def test_an_outcome_with_values_reads_back_complete(store: OptunaStore) -> None:
    outcome = outcome_of(
        EIGHT, drop=0.02, attempt=2, reused_from=f"{STUDY}#7", measured=False, reason="why"
    )
    record = told(store, EIGHT, outcome)
    assert record.state == "complete" and record.has_metrics and record.counted
    assert record.metrics == outcome.metrics
    assert record.violations == pytest.approx({"max_accuracy_drop": 0.01})
    assert not record.feasible
    assert (record.attempt, record.measured, record.reused_from, record.reason) == (
        2,
        False,
        f"{STUDY}#7",
        "why",
    )
    assert record.provenance == outcome.provenance
    assert record.values == pytest.approx(values_of(outcome))
    assert record.ended_at is not None
    assert store.completed() == [record]


def test_an_outcome_without_values_is_pruned(store: OptunaStore) -> None:
    record = told(store, EIGHT, outcome_of(EIGHT, "oom", reason="out of memory"), values=False)
    assert (record.state, record.status, record.reason) == ("pruned", "oom", "out of memory")
    assert record.counted and not record.has_metrics and record.feasible
    assert store.completed() == []


def test_a_lost_outcome_is_failed(store: OptunaStore) -> None:
    record = told(store, EIGHT, outcome_of(EIGHT, "lost", attempt=2), values=False)
    assert (record.state, record.status, record.attempt) == ("failed", "lost", 2)
    assert not record.counted


def test_telling_twice_is_harmless(store: OptunaStore) -> None:
    first = outcome_of(EIGHT)
    record = store.create(SPACE, EIGHT, TrialMarks(), Owner())
    store.tell(record.number, first, values_of(first))
    store.tell(record.number, outcome_of(EIGHT, "lost"), None)
    [again] = store.records()
    assert (again.state, again.status, again.metrics) == ("complete", "ok", first.metrics)


def test_a_stored_trial_reads_back_through_optuna_as_optuna_writes_it(
    store: OptunaStore,
) -> None:
    """The store writes trials itself; Optuna, reading the same storage afresh, sees what
    `Study.tell` would have written, and the constraints as a list (the form
    optuna-dashboard reads too)."""
    outcome = outcome_of(SIXTY_FOUR, drop=0.02)
    record = told(store, SIXTY_FOUR, outcome)
    study = store.study
    if store.storage_url is not None:
        study = optuna.load_study(study_name=store.name, storage=store.storage_url)
    [trial] = study.get_trials()
    assert (trial.number, trial.state) == (record.number, optuna.trial.TrialState.COMPLETE)
    assert trial.params == SPACE.params_of(SIXTY_FOUR)
    assert trial.distributions == SPACE.distributions_of(SIXTY_FOUR)
    assert trial.values == pytest.approx(values_of(outcome))
    assert trial.system_attrs["constraints"] == pytest.approx([0.01])
    assert trial.constraints == pytest.approx({"0": 0.01})
    assert trial.datetime_start is not None and trial.datetime_complete is not None


def test_trials_created_by_two_stores_on_one_study_are_numbered_in_order(
    database_url: str, study_name: str
) -> None:
    stores = [open_store(database_url, study_name) for _ in range(2)]
    numbers = [stores[i % 2].create(SPACE, EIGHT, TrialMarks(), Owner()).number for i in range(6)]
    assert numbers == list(range(6))
    assert [r.number for r in stores[0].records()] == numbers
    for store in stores:
        store.close()


def test_a_parameter_whose_distribution_changed_is_refused(store: OptunaStore) -> None:
    store.create(SPACE, EIGHT, TrialMarks(), Owner())
    name = next(iter(SPACE.params_of(EIGHT)))
    changed = {name: optuna.distributions.FloatDistribution(0.0, 1.0)}
    with pytest.raises(ValueError, match="different distribution"):
        store._create(EIGHT, {name: 0.5}, changed, TrialMarks(), Owner())


def test_an_infinite_value_is_kept_and_nan_fails_the_trial(store: OptunaStore) -> None:
    outcome = outcome_of(EIGHT)
    record = store.create(SPACE, EIGHT, TrialMarks(), Owner())
    store.tell(record.number, outcome, [float("inf"), 1.0])
    nan = store.create(SPACE, INT8, TrialMarks(), Owner())
    store.tell(nan.number, outcome_of(INT8), [float("nan"), 1.0])
    infinite, failed = store.records()
    assert (infinite.state, infinite.values) == ("complete", [float("inf"), 1.0])
    assert (failed.state, failed.values) == ("failed", None)


def test_counted_and_used(store: OptunaStore) -> None:
    told(store, BASELINE, outcome_of(BASELINE))
    told(store, EIGHT, outcome_of(EIGHT, "skipped"), values=False)
    told(store, INT8, outcome_of(INT8, "lost"), values=False)
    store.create(SPACE, SIXTY_FOUR, TrialMarks(), Owner())
    store.enqueue(SPACE, EIGHT, TrialMarks())
    assert store.counted() == 2  # complete and pruned
    assert store.used() == 3  # and running; not failed, not waiting
    assert [r.state for r in store.records()] == [
        "complete",
        "pruned",
        "failed",
        "running",
        "waiting",
    ]
    assert [r.number for r in store.records(("failed", "waiting"))] == [2, 4]


def test_front_holds_the_feasible_trials_no_other_dominates(store: OptunaStore) -> None:
    # objectives: accuracy up, latency down; batch 1 is the fastest
    fastest = told(store, BASELINE, outcome_of(BASELINE))
    accurate = told(store, EIGHT, outcome_of(EIGHT, accuracy=0.97, drop=-0.02))
    told(store, INT8, outcome_of(INT8, drop=0.005))  # as fast as the baseline, less accurate
    # the most accurate, but it breaks the bound: off the front
    violating = told(store, SIXTY_FOUR, outcome_of(SIXTY_FOUR, accuracy=0.99, drop=0.05))
    assert not violating.feasible and accurate.feasible
    front = front_of(store)
    assert sorted(c.trial_number for c in front) == [fastest.number, accurate.number]
    assert all(c.feasible for c in front)
    assert {c.trial_number: c.metrics for c in front}[accurate.number] == accurate.metrics
    # Optuna's own best trials leave the violating trial out as well
    best = {t.number for t in store.study.best_trials}
    assert best == {fastest.number, accurate.number}


def test_a_stored_revalidation_reads_back(store: OptunaStore) -> None:
    stored = StoredRevalidation(
        report={"rounds": 6, "finalists": [{"trial": 3, "ratio": 0.8}]},
        basis={"front": [3, 5]},
        chosen_metrics={"accuracy": 0.95},
        baseline_metrics={"accuracy": 0.96},
        headline={"speedup": 1.25, "interval": [1.1, 1.4]},
    )
    store.save_revalidation(stored)
    assert store.revalidation() == stored
    assert store.revalidation_report() == stored.report


def test_a_sensitivity_table_is_kept_once_per_model_and_mode(store: OptunaStore) -> None:
    node = NodeSensitivity(node="/head/Conv_2", rank=1, op_type="Conv", drop=0.2)
    table = SensitivityTable(model_sha256="b" * 64, mode="int8_static", seconds=2.5, nodes=[node])
    store.save_sensitivity(table)
    store.save_sensitivity(table.model_copy(update={"seconds": 9.0}))
    other_mode = table.model_copy(update={"mode": "int8_dynamic"})
    store.save_sensitivity(other_mode)
    assert store.sensitivities() == [other_mode, table]  # by model, then mode


# -- leases ------------------------------------------------------------------------------


def test_lost_finds_the_running_trials_of_dead_owners(store: OptunaStore) -> None:
    alive, dead, silent = Owner(), Owner(pid=dead_pid()), Owner()
    store.beat(alive)
    store.beat(dead)
    mine = store.create(SPACE, BASELINE, TrialMarks(), alive)
    theirs = store.create(SPACE, EIGHT, TrialMarks(baseline=True), dead)
    unclaimed = store.create(SPACE, INT8, TrialMarks(), silent)  # its owner never beat
    ended = store.create(SPACE, SIXTY_FOUR, TrialMarks(), dead)
    store.tell(ended.number, outcome_of(ended.config, "error"), None)
    lost = store.lost(stale_after_s=3600.0)
    assert sorted(r.number for r in lost) == [theirs.number, unclaimed.number]
    assert all(r.state == "running" for r in lost)
    assert next(r for r in lost if r.number == theirs.number).marks.baseline
    assert mine.number not in {r.number for r in store.lost(stale_after_s=3600.0)}
    assert mine.number in {r.number for r in store.lost(stale_after_s=-1.0)}  # stale beat
    assert not any(r.died_in_process for r in lost)


def test_a_trial_lost_with_an_in_process_owner_says_so(store: OptunaStore) -> None:
    dead = Owner(pid=dead_pid(), in_process=True)
    store.beat(dead)
    store.create(SPACE, EIGHT, TrialMarks(), dead)
    [lost] = store.lost(stale_after_s=3600.0)
    assert lost.died_in_process


# -- studies written before records were typed -------------------------------------------


def old_format_trial(
    config: dict[str, ConfigValue], outcome: TrialEnding, marks: dict[str, Any]
) -> optuna.trial.FrozenTrial:
    """A trial as autotune stored it before typed records: each field an attribute."""
    from optuna.trial import TrialState

    attrs: dict[str, Any] = {
        **marks,
        "config": config,
        "attempt": outcome.attempt,
        "status": outcome.status,
        "variant_key": outcome.variant_key,
        "measured": outcome.measured,
    }
    if outcome.reason is not None:
        attrs["reason"] = outcome.reason
    if outcome.reused_from is not None:
        attrs["reused_from"] = outcome.reused_from
    if outcome.provenance is not None:
        attrs["provenance"] = outcome.provenance.model_dump(mode="json")
    system_attrs: dict[str, Any] = {}
    state = TrialState.PRUNED
    values = None
    if outcome.metrics is not None and outcome.violations is not None:
        attrs["metrics"] = outcome.metrics
        system_attrs = {f"constraints:{k}": v for k, v in outcome.violations.items()}
        state, values = TrialState.COMPLETE, values_of(outcome)
    return optuna.trial.create_trial(
        state=state,
        params=config,
        distributions=SPACE.distributions_of(config),
        values=values,
        user_attrs=attrs,
        system_attrs=system_attrs,
    )


@pytest.mark.parametrize(
    "outcome",
    [
        outcome_of(BASELINE, attempt=1, reason="re-run", reused_from=f"{STUDY}#0"),
        outcome_of(BASELINE, "oom", attempt=1, reason="out of memory"),
    ],
    ids=["complete", "pruned"],
)
def test_a_trial_of_the_older_format_reads_as_one_of_today(
    store: OptunaStore, outcome: TrialEnding
) -> None:
    marks = TrialMarks(baseline=True, attempt=1, retry_of=0)
    store.study.add_trial(
        old_format_trial(BASELINE, outcome, marks.model_dump(exclude_defaults=True))
    )
    created = store.create(SPACE, BASELINE, marks, Owner())
    store.tell(created.number, outcome, values_of(outcome) if outcome.metrics else None)
    old, new = store.records()
    ignored = {"number", "ended_at", "owner"}  # the old trial was added, not asked
    assert old.model_dump(exclude=ignored) == new.model_dump(exclude=ignored)


def test_a_waiting_trial_of_the_older_format_is_asked_with_its_marks(store: OptunaStore) -> None:
    store.study.enqueue_trial(EIGHT, user_attrs={"baseline": True, "attempt": 1, "retry_of": 0})
    marks = TrialMarks(baseline=True, attempt=1, retry_of=0)
    [waiting] = store.waiting()
    assert waiting.marks == marks
    asked = store.ask(SPACE, Owner(), waiting=True)
    assert (asked.config, asked.marks, asked.attempt) == (EIGHT, marks, 1)
