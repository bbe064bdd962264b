"""What a search strategy is: it proposes configurations, answers some trials without
measuring them, and learns from each trial that ends. Strategies are registered by name;
the CLI, the service and the benchmarks read `STRATEGIES`.

A new strategy is one subclass of `Strategy` decorated with `@register_strategy`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from autotune.core.contract import ConfigValue, TrialResult, TrialSpec
from autotune.core.contract.trials import SensitivityTable
from autotune.core.errors import RequestError

if TYPE_CHECKING:
    from autotune.requests.request import TuningRequest
    from autotune.results.records import TrialRecord
    from autotune.space.search_space import EffectiveSpace


@dataclass(frozen=True)
class Proposal:
    config: dict[str, ConfigValue]
    why: str  # stored with the trial: "designed", "neighbour", ...


@dataclass(frozen=True)
class Answer:
    """A trial answered without measuring it: its `result` now (told as it is; `reused_from`
    names the trial whose measurement it repeats), or the number of a running trial whose
    measurement will answer it (`wait_for`)."""

    result: TrialResult | None = None
    reused_from: str | None = None
    wait_for: int | None = None


class Strategy(ABC):
    """One search strategy. `space` and `request` are the study's; `seed` makes it
    repeatable."""

    name: ClassVar[str]
    # Whether `propose` ever returns a configuration (else the sampler proposes every trial).
    proposes: ClassVar[bool] = False

    def __init__(self, space: EffectiveSpace, request: TuningRequest, seed: int | None) -> None:
        self.space = space
        self.request = request
        self.seed = seed

    @abstractmethod
    def sampler(self) -> Any:
        """The Optuna sampler that proposes whenever `propose` returns None."""

    def start(self, records: list[TrialRecord]) -> None:
        """What a resumed study already holds."""
        return None

    def learn_sensitivity(self, tables: list[SensitivityTable]) -> None:
        """The int8 sensitivity rankings the study holds (a resumed one's, or later ones')."""
        return None

    def propose(
        self,
        front: Callable[[], list[dict[str, ConfigValue]]],
        excluded: set[str],
        blocked: Callable[[dict[str, ConfigValue]], bool] = lambda config: False,
    ) -> Proposal | None:
        """The next configuration to measure, or None to let the sampler propose. `front()`
        gives the feasible Pareto front so far (largest hypervolume contribution first);
        `excluded` holds the model variants known to violate the accuracy bound; `blocked`
        says whether a configuration's batch size would not be run (memory, call time)."""
        return None

    def answer(self, study: str, spec: TrialSpec, excluded: set[str]) -> Answer | None:
        """An answer for the trial of `spec` without measuring it, or None to measure it."""
        return None

    def after_trial(self, spec: TrialSpec, result: TrialResult) -> None:
        """Learn from an ended trial."""
        return None


StrategyClass = TypeVar("StrategyClass", bound=type[Strategy])
STRATEGIES: dict[str, type[Strategy]] = {}


def register_strategy(cls: StrategyClass) -> StrategyClass:
    if cls.name in STRATEGIES:
        raise ValueError(f"a strategy named {cls.name!r} is already registered")
    STRATEGIES[cls.name] = cls
    return cls


def make_strategy(
    name: str, space: EffectiveSpace, request: TuningRequest, seed: int | None
) -> Strategy:
    if name not in STRATEGIES:
        raise RequestError("sampler", f"must be one of {sorted(STRATEGIES)}", name)
    return STRATEGIES[name](space, request, seed)


def strategy_names() -> list[str]:
    return sorted(STRATEGIES)
