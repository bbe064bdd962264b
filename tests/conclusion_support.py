"""What the conclusion's tests share: scripted head-to-heads (`Comparing`: each entrant's p95
per round as given), candidates and a `Revalidator` on the coordinator's small space, the
baseline and a finalist, a re-tune beside a previous choice, and a tuned file."""

from __future__ import annotations

from typing import Any, cast

from autotune.conclusion.decision import Headline, Ratio
from autotune.conclusion.head_to_head import Revalidation, Revalidator
from autotune.conclusion.previous import PreviousChoice
from autotune.conclusion.tuned_file import TunedConfig
from autotune.core.contract import (
    Contention,
    EntrantOutcome,
    HeadToHeadResult,
    HeadToHeadSpec,
    RoundFigures,
    TrialMetrics,
)
from autotune.core.metrics import Study, derived
from autotune.execution.base import Executor
from autotune.results.records import Candidate
from autotune.strategies import make_strategy
from tests.coordinator_support import (
    BASELINE,
    SPACE,
    STUDY,
    WORKLOAD,
    config_with,
    make_request,
    open_store,
    table_metrics,
)


def outcome(n: int, p95_per_round: list[float], batch: int = 1) -> EntrantOutcome:
    return EntrantOutcome(
        trial_number=n,
        status="ok",
        rounds=[
            RoundFigures(
                calls=100,
                latency_p50_ms=p95 * 0.9,
                latency_p95_ms=p95,
                throughput_per_s=1000 * batch / p95,
                energy_per_sample_j=p95 / batch,
            )
            for p95 in p95_per_round
        ],
    )


def busy(contended: bool) -> Contention:
    return Contention(
        seconds=1.0,
        cores=2,
        other_cpu_share=0.5 if contended else 0.0,
        machine_other_cpu_share=0.5 if contended else 0.0,
        steal_share=0.0,
        cores_to_itself=1.0 if contended else 2.0,
        contended=contended,
        reasons=["other processes used 50% of the trial's 2 cores"] if contended else [],
    )


QUIET = busy(False)


class Comparing:
    """Answers a head-to-head with each entrant's scripted p95 per round."""

    def __init__(self, p95_per_round: dict[int, list[float]]) -> None:
        self.p95_per_round = p95_per_round

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        entrants = [self._outcome(e.trial_number, e.config) for e in spec.entrants]
        return HeadToHeadResult(entrants=entrants, contention=[QUIET] * spec.rounds, duration_s=0.0)

    def _outcome(self, number: int, config: dict[str, Any]) -> EntrantOutcome:
        rounds = self.p95_per_round[number]
        median = sorted(rounds)[len(rounds) // 2]
        metrics = table_metrics(config).model_copy(
            update={"latency_p95_ms": median, "throughput_per_s": 1000 / median}
        )
        return outcome(number, rounds).model_copy(update={"metrics": metrics})


def candidate(number: int, config: dict[str, Any], p95: float) -> Candidate:
    metrics: TrialMetrics = table_metrics(config).model_copy(update={"latency_p95_ms": p95})
    dumped = derived(metrics.model_dump(), Study(table_metrics(BASELINE).accuracy))
    return Candidate(trial_number=number, config=config, metrics=dumped, feasible=True)


def revalidator(p95_per_round: dict[int, list[float]]) -> Revalidator:
    request = make_request(trials=4)
    rounds = request.validation.rounds
    store = open_store(request, make_strategy("random", SPACE, request, seed=0), SPACE)
    executor = Comparing({n: p[:rounds] for n, p in p95_per_round.items()})
    return Revalidator(
        request, WORKLOAD, STUDY, cast(Executor, executor), store, on_phase=lambda p: None
    )


# The baseline (#0), and one finalist (#3) that was faster in its own trial.
THE_BASELINE = candidate(0, BASELINE, p95=1.2)
FINALIST = candidate(3, config_with(**{"runtime.threads": 1}), p95=1.0)


class ComparingTwice(Comparing):
    """The first head-to-head as scripted; every later one with `then`."""

    def __init__(self, first: dict[int, list[float]], then: dict[int, list[float]]) -> None:
        super().__init__(first)
        self.then = then
        self.specs: list[HeadToHeadSpec] = []

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        self.specs.append(spec)
        if len(self.specs) > 1:
            self.p95_per_round = self.then
        return super().compare(spec)


TEXT = "4.13× lower p95 latency per call (95% CI 4.13–4.13×); 10 paired rounds, replayed"


def tuned_config() -> TunedConfig:
    return TunedConfig(
        config={"batch.size": 8, "precision.mode": "int8_static"},
        metrics={"latency_p95_ms": 0.089},
        baseline={"latency_p95_ms": 0.369},
        constraints={},
        model={"source": "experiments.digits.model:build_model", "sha256": "ab"},
        hardware={"fingerprint": "966fa2efe11c1e8d", "cpu_model": "Intel® Xeon® CPU"},
        software={"autotune": "0.1"},
        study={"name": "digits-cnn", "storage": "sqlite:///o.db", "n_trials": 12},
        mlflow={"tracking_uri": "sqlite:///m.db", "experiment_id": "1", "run_id": "r"},
        artifact="model/config.json",
        headline=Headline(
            text=TEXT,
            ratios={"latency_p95_ms": Ratio(ratio=0.242, ci_low=0.242, ci_high=0.242)},
            rounds=10,
            contended_rounds=0,
            conditions="replayed",
            same_as_baseline=False,
        ),
        revalidation={"rounds": 10},
    )


# The machine's speed in each round, shared by every entrant timed in it: some rounds are
# three times slower than others (a busy machine), which a paired ratio cancels.
MACHINE = [1.0, 3.0, 1.2, 2.5, 1.0, 1.1, 3.0, 1.4, 2.0, 1.0]
# The previous tuning chose #5; its figures then were measured on another day and are not
# what this study compares against.
PREVIOUS = candidate(5, config_with(**{"batch.size": 8}), p95=1.1)


def per_round(factor: float) -> list[float]:
    return [factor * speed for speed in MACHINE]


def retuned(
    p95_factors: dict[int, float], previous: PreviousChoice
) -> tuple[Revalidation, ComparingTwice]:
    """The head-to-head of the baseline, FINALIST and the previous choice, each entrant's
    p95 per round its factor times the machine's speed in that round."""
    checker = revalidator({})
    rounds = {n: per_round(f) for n, f in p95_factors.items()}
    executor = ComparingTwice(rounds, rounds)
    checker.executor = cast(Executor, executor)
    checker.previous = previous
    return checker.revalidate([FINALIST], THE_BASELINE), executor


def measured_previous(measured: Any = PREVIOUS) -> PreviousChoice:
    return PreviousChoice(PREVIOUS.config, "before", "run-before", measured)
