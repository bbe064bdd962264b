"""The `ResultStore` interface: what the coordinator and its phases need of a study's
storage. `OptunaStore` implements it on an Optuna study (in a database, or in memory)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from autotune.core.contract import ConfigValue
from autotune.results.records import (
    Census,
    StoredRevalidation,
    TrialEnding,
    TrialMarks,
    TrialRecord,
    TrialState,
)

if TYPE_CHECKING:
    from autotune.core.contract.trials import SensitivityTable
    from autotune.results.leases import Owner
    from autotune.space.search_space import EffectiveSpace


class ResultStore(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def location(self) -> str: ...

    def locked(self) -> AbstractContextManager[None]:
        """Serializes check-then-act among coordinators sharing the study."""
        ...

    def records(self, states: Sequence[TrialState] | None = None) -> list[TrialRecord]: ...

    def completed(self) -> list[TrialRecord]:
        """The trials that ended with metrics, each configuration once
        (`autotune.results.records.each_configuration_once`)."""
        ...

    def objective_names(self) -> list[str]:
        """The objectives the study was run with, by metric name."""
        ...

    def waiting(self) -> list[TrialRecord]: ...

    def census(self) -> Census: ...

    def used(self) -> int: ...

    def counted(self) -> int: ...

    def enqueue(
        self, space: EffectiveSpace, config: dict[str, ConfigValue], marks: TrialMarks
    ) -> None: ...

    def ask(self, space: EffectiveSpace, owner: Owner, waiting: bool) -> TrialRecord: ...

    def create(
        self,
        space: EffectiveSpace,
        config: dict[str, ConfigValue],
        marks: TrialMarks,
        owner: Owner,
    ) -> TrialRecord: ...

    def tell(self, number: int, ending: TrialEnding, values: list[float] | None) -> None: ...

    def revalidation(self) -> StoredRevalidation | None: ...

    def save_revalidation(self, stored: StoredRevalidation) -> None: ...

    def sensitivities(self) -> list[SensitivityTable]:
        """The int8 sensitivity rankings the study's trials were built by, one per ranked
        model and mode."""
        ...

    def save_sensitivity(self, table: SensitivityTable) -> None: ...

    def beat(self, owner: Owner) -> None: ...

    def lost(self, stale_after_s: float) -> list[TrialRecord]: ...

    def close(self) -> None: ...
