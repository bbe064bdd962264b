"""autotune's own search strategy: what it knows about its space, spent on fewer measurements.

- A designed initial set follows the baseline: each precision on each engine at one batch
  size, everything else as the baseline runs. It tells early which model variants keep their
  accuracy and which kernels are fast. It starts with a thread probe and is measured in the
  order `autotune.strategies.design_order` gives: the engine that leads the front first, a
  front leader's precision at its batch-size siblings and on the other engines early, each
  engine at batch 1 in its fastest precision, pairs the knobs declare refused last.
- The batch size follows how it moves the request's objectives and constraints
  (`autotune.strategies.batch_sizes`): where a larger batch can only be dominated (the p95
  per call is the only time objective), the designed set, the local search and the sampler
  keep to the smallest batch size; otherwise the designed set runs at the end of the range
  the request leans to, or in the middle without a leaning. Without a leaning, where the
  selection ranks by the time per call (`lowest_latency`, the default), each engine is
  measured at the smallest batch too, in its fastest precision, after the designed set's
  other points: the answer is picked there, and an engine that only wins at batch 1 would
  otherwise be found late or never.
- Past the level-off batch: where the selection ranks by a figure per sample (highest
  throughput, lowest energy), the selection's best point of the feasible front is measured
  at the next larger batch size ("climb"), once the baseline's precision was measured on
  each engine and before any other proposal, as long as its own last step up gained more
  than `CLIMB_GAIN` and the call stays within `measurement.max_call_ms` by the search's
  estimate; it stops where a step gains less, the largest batch is reached, or the next
  call would be too long. Then that point is measured at its other thread counts: more
  threads can pay at a large batch where the thread probe at batch 1 found they did not.
- An int8 configuration whose variant breaks `max_accuracy_drop` is measured next with
  the next static int8 `precision.calibration` (minmax, percentile, entropy: every node
  stays int8, "calibration"), then the most accurate of those quantizing MatMul and Gemm
  alone ("op_types"), then the most accurate so far with a larger `precision.fallback`
  (more of its most sensitive nodes kept in float) until the bound holds or the values
  run out ("fallback"): the smallest value the model's int8 sensitivity ranking predicts
  to meet the bound from the measured drop, the next value where no ranking of the model
  and mode is known, none where the ranking predicts more than a quarter of the nodes in
  float (int8 cannot pay; `int8_steps.more_accurate`).
- Then a Pareto local search: the unmeasured neighbours (one dimension changed) of the
  feasible front found so far, the point with the largest hypervolume contribution first;
  nearest first (one step along a numeric dimension before two), and at each step
  throughput dimensions (batch size, threads) before the other kernel choices, and those
  before the model variant. With a leaning, a batch-size step toward its end of the range
  comes first and one away from it only after the other kernel choices of that step;
  without one, of two batch sizes the same step away the one on the selection's side comes
  first (the smaller one where the selection has no side). Where larger batches are
  dominated, a batch size is only stepped down, straight to the smallest, and no
  configuration is proposed whose sibling at a smaller batch size is known.
  Every few proposals, and whenever the front has no unmeasured neighbour left, the sampler
  proposes.
- A proposal that repeats a finished configuration is told from that trial without being
  measured; one that repeats a configuration still being measured waits for that measurement.
- A configuration whose model variant already violates `max_accuracy_drop` is not measured:
  accuracy depends only on the variant. Nor is one that differs only in throughput dimensions
  from a configuration that could not be built: batch size and threads do not decide that;
  nor, where the engine could not convert the model, in that engine's own options (OpenVINO's
  hint and streams), which apply only to a converted model. A refusal of the batch size alone
  (`reasons.refuses_batch_only`: the model takes a fixed batch) rules out only other thread
  counts at that batch size. An error whose reason names its exception type and stage
  (`reasons.error_signature`) is deterministic: it rules out the configurations that differ
  from it only in batch size or threads, as an unsupported build does.
- The sampler is multivariate TPE for mixed categorical spaces, with a constant liar so that
  several slots do not propose the same point; where larger batches are dominated it leaves
  the batch size at the smallest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.core.contract import (
    ConfigValue,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
)
from autotune.core.contract.trials import SensitivityKey, SensitivityTable
from autotune.core.errors import engine_that_cannot_convert
from autotune.core.knobs import ENGINE_KEY, ENGINES, variant_key
from autotune.strategies.base import Answer, Proposal, Strategy, register_strategy
from autotune.strategies.batch_sizes import (
    BATCH,
    BatchSteps,
    batches_within,
    smaller_batches,
    smallest_batches,
)
from autotune.strategies.design_order import next_designed
from autotune.strategies.designed import ConfigKey, changed, config_key, designed_configs
from autotune.strategies.int8_steps import beyond_ranking, more_accurate
from autotune.strategies.reasons import error_signature, refuses_batch_only
from autotune.strategies.steps import climb

if TYPE_CHECKING:
    from autotune.requests.request import TuningRequest
    from autotune.results.records import TrialRecord
    from autotune.space.search_space import EffectiveSpace

NAME = "autotune"
# The designed set is the sampler's startup; TPE models from this many trials on.
STARTUP_TRIALS = 4
# After the designed set, every this-many-th proposal is the sampler's, the rest are neighbours.
SAMPLER_EVERY = 4
# They change how fast a configuration runs, never whether it can be built.
THROUGHPUT_DIMENSIONS = ("batch.size", "runtime.threads")
ACCURACY_VIOLATION = "its variant violates the accuracy constraint"
UNSUPPORTED_LIKE = "differs only in batch size or threads from unsupported trial"
UNCONVERTIBLE_LIKE = (
    "differs only in batch size, threads or its engine's options from unsupported trial"
)
ERROR_LIKE = "differs only in batch size or threads from trial"


def make_strategy_sampler(seed: int | None, fixed: dict[str, ConfigValue] | None = None) -> Any:
    """TPE, with the parameters in `fixed` held at their values."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        # `group` and the partly fixed sampler are marked experimental; autotune's tests pin
        # the behaviour it relies on.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=STARTUP_TRIALS,
            seed=seed,
        )
        return optuna.samplers.PartialFixedSampler(fixed, tpe) if fixed else tpe


@dataclass(frozen=True)
class PastResult:
    """What measuring a configuration gave, to answer a repeat of it."""

    trial_number: int
    status: Any
    reason: str | None
    metrics: TrialMetrics | None
    provenance: Provenance | None

    def result_for(self, spec: TrialSpec) -> TrialResult:
        screened = self.status == "screened"
        return TrialResult.for_spec(
            spec,
            self.status,
            self.reason,
            0.0,
            None if screened else self.metrics,
            self.provenance,
            self.metrics if screened else None,
        )


@dataclass
class Ledger:
    """Per configuration: the trial that answered it, or ours that is measuring it now, and
    the configurations proposed. The `request` orders batch-size steps in the local
    search (`batch_sizes.batch_lean`), and says whether larger batches are dominated."""

    space: EffectiveSpace
    designed: list[dict[str, ConfigValue]]
    request: TuningRequest | None = None
    finished: dict[ConfigKey, PastResult] = field(default_factory=dict)
    in_flight: dict[ConfigKey, int] = field(default_factory=dict)
    proposed: set[ConfigKey] = field(default_factory=set)
    unsupported: dict[ConfigKey, PastResult] = field(default_factory=dict)
    unconvertible: dict[ConfigKey, PastResult] = field(default_factory=dict)
    retries: list[list[dict[str, ConfigValue]]] = field(default_factory=list)
    # The int8 sensitivity rankings learnt, by ranked model and mode (`learn_sensitivity`).
    sensitivity: dict[SensitivityKey, SensitivityTable] = field(default_factory=dict)
    _searched: int = 0

    def load(self, records: list[TrialRecord]) -> None:
        """The past results a resumed study already holds."""
        for record in records:
            if not record.counted or record.status in (None, "lost", "skipped"):
                continue
            past = PastResult(
                record.number,
                record.status,
                record.reason,
                record.measured_metrics(),
                record.provenance,
            )
            self.finished.setdefault(config_key(record.config), past)
            self._rule_out(record.config, past)

    def settle(self, number: int, spec: TrialSpec, result: TrialResult) -> None:
        """Record how trial `number` ended."""
        key = config_key(spec.config)
        if self.in_flight.get(key) == number:
            del self.in_flight[key]
        if result.status == "too_slow" and result.slow_call_ms is not None:
            self._retry_smaller(spec.config, result.slow_call_ms)
        if result.status not in ("lost", "skipped"):
            figures = result.metrics or result.screening
            past = PastResult(number, result.status, result.reason, figures, result.provenance)
            self.finished.setdefault(key, past)
            self._rule_out(spec.config, past)
        self.learn_sensitivity(result.sensitivity)

    def learn_sensitivity(self, tables: list[SensitivityTable]) -> None:
        """Int8 sensitivity rankings, a trial's or the study's (the first of each model and
        mode stays): `int8_steps.more_accurate` predicts the fallback to measure by them."""
        for table in tables:
            self.sensitivity.setdefault(table.key, table)

    def _retry_smaller(self, config: dict[str, ConfigValue], call_ms: float) -> None:
        """A configuration too slow at its batch is tried next at the largest smaller batch
        whose call, at its own call time per sample, stays within `max_call_ms` (and that
        the search's estimate does not block, when it is proposed)."""
        max_call_ms = None if self.request is None else self.request.measurement.max_call_ms
        batches = self.space.choices().get(BATCH, [])
        smaller = batches_within(batches, config.get(BATCH), call_ms, max_call_ms)
        if smaller:
            self.retries.append([changed(self.space, config, {BATCH: b}) for b in smaller])

    def _rule_out(self, config: dict[str, ConfigValue], past: PastResult) -> None:
        """What an unsupported or deterministically failing trial says of its siblings (see
        the module's docstring)."""
        if past.status == "error" and error_signature(past.reason) is not None:
            self.unsupported.setdefault(_build_key(config), past)
        if past.status != "unsupported":
            return
        if engine_that_cannot_convert(past.reason) == config.get(ENGINE_KEY):
            self.unconvertible.setdefault(_conversion_key(config), past)
        elif refuses_batch_only(past.reason):
            self.unsupported.setdefault(_build_key(config, keep_batch=True), past)
        else:
            self.unsupported.setdefault(_build_key(config), past)

    def next_proposal(
        self,
        front: Callable[[], list[dict[str, ConfigValue]]],
        excluded: set[str],
        blocked: Callable[[dict[str, ConfigValue]], bool] = lambda config: False,
    ) -> tuple[dict[str, ConfigValue], str] | None:
        """The next designed configuration not yet known, else an unknown neighbour of the
        `front` (in the order given) whose variant is not in `excluded` and whose batch size is
        not `blocked`; None when the sampler proposes. A configuration too slow at its batch
        size comes first, at a smaller one (`retries`)."""
        while self.retries:
            for retry in self.retries.pop(0):
                if not self.known(config_key(retry)) and not blocked(retry):
                    self.proposed.add(config_key(retry))
                    return retry, "smaller batch"
        designed = next_designed(self, front, excluded, blocked)
        if designed is not None:
            self.proposed.add(config_key(designed[0]))
            return designed
        accurate = more_accurate(self, excluded, blocked)
        if accurate is not None:
            self.proposed.add(config_key(accurate[0]))
            return accurate
        larger = climb(self, front(), excluded, blocked)
        if larger is not None:
            self.proposed.add(config_key(larger))
            return larger, "climb"
        self._searched += 1
        if self._searched % SAMPLER_EVERY == 0:
            return None
        steps = BatchSteps.of(self.request)
        for point in front():
            for option in self._neighbours(point, steps):
                key = config_key(option)
                if self.known(key) or variant_key(option) in excluded or blocked(option):
                    continue
                if steps.larger_dominated and self._smaller_batch_known(option):
                    continue
                if self.buildable(option):
                    self.proposed.add(key)
                    return option, "neighbour"
        return None

    def buildable(self, config: dict[str, ConfigValue]) -> bool:
        """Not like a configuration that could not be built, within its int8 ranking's node
        count (`int8_steps.beyond_ranking`), and producible by the space."""
        if self.unsupported_like(config) is not None or beyond_ranking(self, config) is not None:
            return False
        return self.space.produces(config)

    def unsupported_like(self, config: dict[str, ConfigValue]) -> PastResult | None:
        """A finished trial that could not be built (or failed with a deterministic error)
        and differs from `config` only in throughput dimensions (only in threads, where its
        batch size alone was refused), or, where its engine could not convert the model, also
        in that engine's options."""
        for like in (
            self.unsupported.get(_build_key(config)),
            self.unsupported.get(_build_key(config, keep_batch=True)),
            self.unconvertible.get(_conversion_key(config)),
        ):
            if like is not None:
                return like
        return None

    def _neighbours(
        self, config: dict[str, ConfigValue], steps: BatchSteps
    ) -> list[dict[str, ConfigValue]]:
        """Configurations one categorical dimension away (see `changed`), nearest first: a
        numeric value one step along its dimension before two steps, and at each step
        throughput dimensions, then other kernel choices, then the model variant. With a
        lean, a batch size away from its end of the range comes after the kernel choices.
        Where larger batches are dominated, a batch size is only stepped down, the smallest
        first (`BatchSteps.rank`)."""
        ranked: list[tuple[tuple[int, int, bool, int], dict[str, ConfigValue]]] = []
        for position, dim in enumerate(self.space.dimensions):
            if (
                dim.name not in config
                or dim.values is None
                or config[dim.name] not in dim.values
                or not dim.active(config)
            ):
                continue
            for value in dim.values:
                if value == config[dim.name]:
                    continue
                order = _step_order(dim.values, dim.name, config[dim.name], value, steps)
                if order is not None:
                    option = changed(self.space, config, {dim.name: value})
                    ranked.append(((*order, position), option))
        ranked.sort(key=lambda pair: pair[0])
        return [option for _, option in ranked]

    def _smaller_batch_known(self, config: dict[str, ConfigValue]) -> bool:
        """Whether the same configuration at a smaller batch size was measured, or is being
        measured or proposed."""
        return any(
            self.known(config_key(changed(self.space, config, {BATCH: batch})))
            for batch in smaller_batches(self.space, config)
        )

    def known(self, key: ConfigKey) -> bool:
        return key in self.finished or key in self.in_flight or key in self.proposed


def _step_order(
    values: list[ConfigValue],
    name: str,
    here: ConfigValue,
    there: ConfigValue,
    steps: BatchSteps,
) -> tuple[int, int, bool] | None:
    """How near a step from `here` to `there` along dimension `name` ranks: its length, its
    class (`_neighbour_class`) and whether it moves away from the preferred end of the batch
    range; None for a batch-size step not taken."""
    kind = _neighbour_class(name)
    if name != BATCH:
        numeric = all(isinstance(v, int | float) for v in values)
        return abs(values.index(there) - values.index(here)) if numeric else 1, kind, False
    rank = steps.rank(values, here, there)
    if rank is None:
        return None
    step, against_lean, against_preference = rank
    return step, 2 if against_lean and against_preference else kind, against_preference


def _neighbour_class(name: str) -> int:
    """0: throughput dimensions; 1: other kernel choices; 3: the model variant (2: a batch
    size against the lean, see `Ledger._neighbours`)."""
    if name in THROUGHPUT_DIMENSIONS:
        return 0
    from autotune.core.knobs import defines_variant

    return 3 if defines_variant(name) else 1


def _build_key(config: dict[str, ConfigValue], keep_batch: bool = False) -> ConfigKey:
    """The configuration without what does not decide whether it builds: its throughput
    dimensions, or only its threads where the batch size does decide (`keep_batch`). The two
    keys never collide: one holds the batch size, the other not."""
    ignored = {"runtime.threads"} if keep_batch else set(THROUGHPUT_DIMENSIONS)
    return config_key({k: v for k, v in config.items() if k not in ignored})


def _like(unbuildable: PastResult) -> str:
    """Why a configuration the `unbuildable` trial rules out is skipped."""
    if unbuildable.status == "error":
        return (
            f"{ERROR_LIKE} #{unbuildable.trial_number}, whose error would repeat: "
            f"{unbuildable.reason}"
        )
    converts = engine_that_cannot_convert(unbuildable.reason) is None
    like = UNSUPPORTED_LIKE if converts else UNCONVERTIBLE_LIKE
    return f"{like} #{unbuildable.trial_number}: {unbuildable.reason}"


def _conversion_key(config: dict[str, ConfigValue]) -> ConfigKey:
    """`_build_key` less the options of the configuration's engine: they apply only once the
    engine has converted the model (`autotune.core.errors.CannotConvert`)."""
    engine = ENGINES.get(str(config.get(ENGINE_KEY)))
    options = {option.key for option in engine.options} if engine is not None else set()
    ignored = {*THROUGHPUT_DIMENSIONS, *options}
    return config_key({k: v for k, v in config.items() if k not in ignored})


@register_strategy
class AutotuneStrategy(Strategy):
    """autotune's own strategy (see the module's docstring)."""

    name = NAME
    proposes = True

    def __init__(self, space: EffectiveSpace, request: TuningRequest, seed: int | None) -> None:
        super().__init__(space, request, seed)
        self.ledger = Ledger(space, designed_configs(space, request), request)

    def sampler(self) -> Any:
        """TPE; where larger batches are dominated, held to the smallest batch size."""
        dominated = BatchSteps.of(self.request).larger_dominated
        return make_strategy_sampler(self.seed, smallest_batches(self.space) if dominated else None)

    def learn_sensitivity(self, tables: list[SensitivityTable]) -> None:
        self.ledger.learn_sensitivity(tables)

    def start(self, records: list[TrialRecord]) -> None:
        self.ledger.load(records)
        for record in records:
            self._learn_call_times(record.call_ms_by_batch)

    def _learn_call_times(self, call_ms_by_batch: dict[int, float]) -> None:
        """The baseline's call times by batch size place the designed set's batch."""
        if call_ms_by_batch:
            designed = designed_configs(self.space, self.request, call_ms_by_batch)
            self.ledger.designed = designed

    def propose(
        self,
        front: Callable[[], list[dict[str, ConfigValue]]],
        excluded: set[str],
        blocked: Callable[[dict[str, ConfigValue]], bool] = lambda config: False,
    ) -> Proposal | None:
        proposal = self.ledger.next_proposal(front, excluded, blocked)
        return None if proposal is None else Proposal(*proposal)

    def answer(self, study: str, spec: TrialSpec, excluded: set[str]) -> Answer | None:
        """Not measured: a variant known to violate the accuracy bound, a configuration that
        could not be built, or failed with a deterministic error, at another batch size or
        thread count (or, where its engine could not convert the model, with other options of
        that engine), an int8 fallback of as many nodes as its ranking holds, or one that was
        (or is being) measured."""
        if variant_key(spec.config) in excluded:
            return Answer(TrialResult.for_spec(spec, "skipped", ACCURACY_VIOLATION))
        unbuildable = self.ledger.unsupported_like(spec.config)
        if unbuildable is not None:
            return Answer(TrialResult.for_spec(spec, "skipped", _like(unbuildable)))
        beyond = beyond_ranking(self.ledger, spec.config)
        if beyond is not None:
            return Answer(TrialResult.for_spec(spec, "skipped", beyond))
        key = config_key(spec.config)
        past = self.ledger.finished.get(key)
        if past is not None:
            return Answer(past.result_for(spec), f"{study}#{past.trial_number}")
        if key in self.ledger.in_flight:
            return Answer(wait_for=self.ledger.in_flight[key])
        self.ledger.in_flight[key] = spec.trial_number
        return None

    def after_trial(self, spec: TrialSpec, result: TrialResult) -> None:
        self.ledger.settle(spec.trial_number, spec, result)
        self._learn_call_times(result.call_ms_by_batch)
