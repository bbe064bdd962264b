"""Head-to-head rounds on the real digits workload: every entrant timed in every round, one
that cannot be built reported with its reason, the others unharmed."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.conclusion.decision import ratio
from autotune.core.contract import Contention, Entrant, HeadToHeadSpec
from tests.workers_support import FAST, digits_workload
from workers.head_to_head import block_settings, run_head_to_head
from workers.measuring.contention import ContentionProbe
from workers.predictor import Predictor

ROUNDS = 6


def entrant(number: int, **config: object) -> Entrant:
    return Entrant(trial_number=number, config=config, known_accuracy=0.9)


@pytest.mark.exclusive  # it times a speed difference: other tests meanwhile would be noise
def test_entrants_are_timed_in_every_round_and_a_failure_is_reported() -> None:
    spec = HeadToHeadSpec(
        study="test",
        workload=digits_workload(),
        entrants=[
            entrant(0, **{"batch.size": 1, "runtime.threads": 1}),
            entrant(1, **{"batch.size": 16, "runtime.threads": 1}),
            entrant(2, **{"precision.mode": "int8_static", "runtime.engine": "torch_eager"}),
        ],
        rounds=ROUNDS,
        round_seconds=0.05,
        measurement=FAST.model_copy(update={"contention": "warn"}),
    )
    result = run_head_to_head(spec)
    single, batched, broken = result.entrants
    assert [e.trial_number for e in result.entrants] == [0, 1, 2]
    assert broken.status == "unsupported" and broken.reason and not broken.rounds
    assert len(result.contention) == ROUNDS
    for outcome in (single, batched):
        assert outcome.status == "ok" and len(outcome.rounds) == ROUNDS
        assert outcome.metrics is not None and outcome.metrics.accuracy == 0.9
        assert outcome.metrics.iterations == sum(r.calls for r in outcome.rounds)
        assert all(r.calls >= 1 for r in outcome.rounds)
    assert result.provenance is not None and result.provenance.model_sha256
    # Batching 16 images per call serves more images per second than one per call.
    assert ratio(batched, single, "throughput_per_s").low > 1.0


def test_a_block_lasts_its_round_seconds_but_never_runs_away() -> None:
    block = block_settings(FAST, 0.3)
    assert (block.min_seconds, block.max_seconds, block.settle_tolerance) == (0.3, 1.2, None)
    assert block.warmup_iters == 0 and block.min_iters <= block.max_iters


def test_an_entrant_run_as_loaded_is_exported_reloaded_and_timed_through_predict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    predict = Predictor.predict
    monkeypatch.setattr(Predictor, "predict", lambda self, x: calls.append(x) or predict(self, x))
    config = {"runtime.engine": "onnxruntime", "batch.size": 4, "runtime.threads": 1}
    spec = HeadToHeadSpec(
        study="test",
        workload=digits_workload(),
        entrants=[
            entrant(0, **config),
            Entrant(trial_number=0, config=config, known_accuracy=0.9, loaded_artifact=True),
        ],
        rounds=2,
        round_seconds=0.02,
        measurement=FAST.model_copy(update={"contention": "warn"}),
    )
    plain, loaded = run_head_to_head(spec).entrants
    assert (plain.loaded_artifact, loaded.loaded_artifact) == (False, True)
    assert plain.status == loaded.status == "ok"
    assert len(plain.rounds) == len(loaded.rounds) == 2
    timed = sum(r.calls for r in loaded.rounds)
    assert len(calls) >= timed and all(batch.shape[0] == 4 for batch in calls)


def test_a_round_waits_for_quiet_only_after_a_build_or_a_contended_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rounds 0-2 are the first build's, 3-5 the second's; round 1 ends contended. The
    machine is looked at before rounds 0 and 3 (after a build) and 2 (after round 1)."""
    contended_rounds = {1}
    looks: list[int] = []
    stopped: list[Contention] = []
    stop = ContentionProbe.stop

    def scripted_stop(self: ContentionProbe, *args: Any, **kwargs: Any) -> Contention:
        window = stop(self, *args, **kwargs)
        stopped.append(window.model_copy(update={"contended": len(stopped) in contended_rounds}))
        return stopped[-1]

    monkeypatch.setattr(ContentionProbe, "stop", scripted_stop)
    monkeypatch.setattr(
        ContentionProbe,
        "wait_for_quiet",
        lambda self, max_wait_s: looks.append(len(stopped)) or 0.0,
    )
    spec = HeadToHeadSpec(
        study="test",
        workload=digits_workload(),
        entrants=[entrant(0, **{"batch.size": 1}), entrant(1, **{"batch.size": 8})],
        rounds=ROUNDS,
        round_seconds=0.02,
        measurement=FAST.model_copy(update={"contention": "wait", "contention_window_s": 0.0}),
    )
    result = run_head_to_head(spec)
    assert looks == [0, 2, 3]
    assert [c.contended for c in result.contention] == [
        i in contended_rounds for i in range(ROUNDS)
    ]
