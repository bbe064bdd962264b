"""What the coordinator relies on from every `Executor`: in-process, replay and Ray (slow).

Each test runs against each implementation (tests/executor_fixtures.py); where one
legitimately differs, its case says so in a capability field, and where one differs without a
reason the test is an expected failure naming the inconsistency.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autotune.core.contract import (
    ArtifactInfo,
    ConfigValue,
    Entrant,
    HeadToHeadSpec,
    ModelInfo,
    TrialResult,
    TrialSpec,
)
from autotune.core.errors import AutotuneError
from autotune.core.knobs import variant_key
from tests.executor_fixtures import (
    CASES,
    RUNNABLE,
    RUNNABLE_BATCHED,
    UNBUILDABLE,
    ExecutorCase,
    drain,
)
from tests.workers_support import FAST

STUDY = "conformance"


@pytest.fixture(scope="module", params=CASES)
def shared_case(request: pytest.FixtureRequest) -> Iterator[ExecutorCase]:
    make_case: Callable[[], ExecutorCase] = request.param
    case = make_case()
    yield case
    case.close()


@pytest.fixture
def case(shared_case: ExecutorCase, request: pytest.FixtureRequest) -> Iterator[ExecutorCase]:
    """The module's executor, with nothing pending before and after the test."""
    reason = shared_case.inconsistencies.get(request.node.originalname)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    assert shared_case.live().pending() == 0
    yield shared_case
    if shared_case.executor is not None:
        drain(shared_case.executor)


def trial(
    case: ExecutorCase, number: int, config: dict[str, ConfigValue], attempt: int = 0
) -> TrialSpec:
    return TrialSpec(
        study=STUDY,
        trial_number=number,
        attempt=attempt,
        workload=case.workload,
        config=config,
        measurement=FAST,
    )


def identity(item: TrialSpec | TrialResult) -> tuple[str, int, int]:
    return item.study, item.trial_number, item.attempt


def test_slots_is_a_positive_int(case: ExecutorCase) -> None:
    slots = case.live().slots
    assert isinstance(slots, int) and not isinstance(slots, bool)
    assert slots >= 1


def test_a_submitted_spec_comes_back_once_as_its_result(case: ExecutorCase) -> None:
    executor = case.live()
    spec = trial(case, 3, RUNNABLE, attempt=1)
    executor.submit(spec)
    assert executor.pending() == 1
    (result,) = executor.wait()
    assert identity(result) == identity(spec)
    assert result.variant_key == variant_key(spec.config)  # the coordinator's accuracy cache key
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.latency_p95_ms > 0
    assert executor.pending() == 0
    assert executor.wait() == []  # nothing pending: it returns at once, with nothing


def test_slots_kept_full_every_spec_comes_back_exactly_once(case: ExecutorCase) -> None:
    """The coordinator's loop: fill every slot, wait, refill the freed slots."""
    executor = case.live()
    configs = [RUNNABLE, RUNNABLE_BATCHED]
    specs = [trial(case, n, configs[n % 2]) for n in range(2 * executor.slots + 1)]
    queue = list(specs)
    returned: list[TrialResult] = []
    while queue or executor.pending():
        while queue and executor.pending() < executor.slots:
            executor.submit(queue.pop(0))
        finished = executor.wait()
        assert finished, "wait returned nothing while trials were pending"
        returned += finished
        submitted = len(specs) - len(queue)
        assert executor.pending() == submitted - len(returned)
    assert sorted(identity(r) for r in returned) == sorted(identity(s) for s in specs)
    assert all(r.status == "ok" for r in returned), [r.reason for r in returned]


def test_submit_without_an_idle_slot_is_refused(case: ExecutorCase) -> None:
    executor = case.live()
    for number in range(executor.slots):
        executor.submit(trial(case, number, RUNNABLE))
    with pytest.raises(AutotuneError, match="no idle slot"):
        executor.submit(trial(case, executor.slots, RUNNABLE))
    returned = drain(executor)
    assert sorted(r.trial_number for r in returned) == list(range(executor.slots))


def test_an_unbuildable_configuration_is_a_result_not_an_exception(case: ExecutorCase) -> None:
    executor = case.live()
    spec = trial(case, 5, UNBUILDABLE, attempt=2)
    executor.submit(spec)
    (result,) = executor.wait()
    assert identity(result) == identity(spec)
    assert result.status != "ok" and result.metrics is None
    assert result.reason


def test_inspect_names_the_model_and_the_hardware_that_results_were_measured_on(
    case: ExecutorCase,
) -> None:
    executor = case.live()
    inspection = executor.inspect(case.workload)
    info = inspection.model
    assert isinstance(info, ModelInfo)
    (kind,) = inspection.kinds  # one executor, one kind of node
    assert inspection.kinds == executor.kinds()
    assert kind.slots == executor.slots
    if case.model_sha256 is not None:
        assert info.sha256 == case.model_sha256
    if case.loads_the_model:
        assert info.n_samples > 0 and info.has_labels and info.input_shape
    executor.submit(trial(case, 6, RUNNABLE))
    (result,) = executor.wait()
    assert result.provenance is not None
    assert result.provenance.model_sha256 == info.sha256
    assert result.provenance.hardware_fingerprint == kind.fingerprint
    assert result.provenance.node_id in {node.node_id for node in kind.nodes}


def head_to_head(case: ExecutorCase, *configs: dict[str, ConfigValue]) -> HeadToHeadSpec:
    """Two short rounds: each entrant is built once per half of the rounds."""
    return HeadToHeadSpec(
        study=STUDY,
        workload=case.workload,
        entrants=[
            Entrant(trial_number=10 + n, config=config, known_accuracy=0.98)
            for n, config in enumerate(configs)
        ],
        rounds=2,
        round_seconds=0.02,
        measurement=FAST,
    )


def test_compare_gives_one_outcome_per_entrant(case: ExecutorCase) -> None:
    spec = head_to_head(case, RUNNABLE, RUNNABLE_BATCHED, UNBUILDABLE)
    result = case.live().compare(spec)
    assert [o.trial_number for o in result.entrants] == [e.trial_number for e in spec.entrants]
    *runnable, unbuildable = result.entrants
    for outcome in runnable:
        assert outcome.status == "ok", outcome.reason
        assert outcome.metrics is not None and len(outcome.rounds) == spec.rounds
    assert unbuildable.status != "ok" and unbuildable.reason and unbuildable.metrics is None
    assert len(result.contention) == (spec.rounds if case.observes_contention else 0)


def test_compare_while_results_are_pending_is_refused(case: ExecutorCase) -> None:
    executor = case.live()
    executor.submit(trial(case, 7, RUNNABLE))
    with pytest.raises(AutotuneError, match="compare called while trials are running"):
        executor.compare(head_to_head(case, RUNNABLE))


def test_export_writes_the_artifact_it_describes(case: ExecutorCase, tmp_path: Path) -> None:
    out_dir = tmp_path / "tuned" / "artifacts"  # created by the export, parents too
    artifact = case.live().export(trial(case, 8, RUNNABLE), str(out_dir))
    assert isinstance(artifact, ArtifactInfo)
    assert artifact.format in case.artifact_formats
    path = Path(artifact.path)
    assert path.is_file() and path.parent == out_dir
    assert artifact.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_close_is_idempotent(case: ExecutorCase) -> None:
    executor = case.live()
    case.closed_by_test()
    executor.close()
    executor.close()
