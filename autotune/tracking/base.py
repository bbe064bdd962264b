"""What the coordinator records about a study, and a tracker that records nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from autotune.core.contract.trials import SensitivityTable
from autotune.core.errors import AutotuneError
from autotune.core.metrics import Metric
from autotune.results.records import Candidate


class TrackerClosed(AutotuneError):
    """A tracker was asked to log after `finish`."""


class Tracker(Protocol):
    """One record per study (the parent) and one per trial, in the order the coordinator
    makes these calls: `log_study_inputs`, `log_trial` per told trial, then `log_revalidation`,
    `log_results`, `log_comparison` and `finish` (which may come twice: a study that ends
    without a feasible configuration finishes, then fails)."""

    experiment_id: str
    parent_run_id: str

    @property
    def closed(self) -> bool:
        """Whether `finish` was called: nothing is logged after it."""
        ...

    def log_study_inputs(
        self, params: dict[str, Any], documents: dict[str, Any], tags: dict[str, str]
    ) -> None: ...

    def log_trial(
        self,
        trial_number: int,
        attempt: int,
        config: dict[str, Any],
        metrics: dict[str, Any] | None,
        tags: dict[str, str],
        duration_s: float = 0.0,
        texts: dict[str, str] | None = None,
    ) -> None:
        """Record a told trial (metrics None: it failed) that ran for `duration_s` until now,
        with `texts` (file name -> text, e.g. a failure's traceback) as files of its record;
        a trial number already recorded is not recorded again."""
        ...

    def log_sensitivity(self, table: SensitivityTable) -> None:
        """An int8 sensitivity ranking the study's trials were built by, as files of the
        study's record (once per model and mode)."""
        ...

    def log_revalidation(self, report: dict[str, Any]) -> None: ...

    def log_results(
        self,
        candidates: Sequence[Candidate],
        front: Sequence[Candidate],
        objectives: Sequence[Metric],
        metrics: dict[str, float],
        documents: dict[str, Any],
        artifact_dir: str | None,
        tags: dict[str, str],
    ) -> None: ...

    def log_comparison(self, comparison: dict[str, Any]) -> None:
        """A re-tune's choice against the previous tuning's (a `PreviousComparison`
        document)."""
        ...

    def flush(self) -> None:
        """Return once every trial logged so far is recorded; raise what a deferred write
        raised."""
        ...

    def finish(self, status: str) -> None:
        """Flush, mark the study's record with `status` and close the tracker."""
        ...


class NullTracker:
    """Records nothing; its ids depend only on the study's name."""

    def __init__(self, study: str = "study") -> None:
        self.experiment_id = "null"
        self.parent_run_id = f"null-{study}"
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def log_study_inputs(
        self, params: dict[str, Any], documents: dict[str, Any], tags: dict[str, str]
    ) -> None:
        self._check_open()

    def log_trial(
        self,
        trial_number: int,
        attempt: int,
        config: dict[str, Any],
        metrics: dict[str, Any] | None,
        tags: dict[str, str],
        duration_s: float = 0.0,
        texts: dict[str, str] | None = None,
    ) -> None:
        self._check_open()

    def log_sensitivity(self, table: SensitivityTable) -> None:
        self._check_open()

    def log_revalidation(self, report: dict[str, Any]) -> None:
        self._check_open()

    def log_results(
        self,
        candidates: Sequence[Candidate],
        front: Sequence[Candidate],
        objectives: Sequence[Metric],
        metrics: dict[str, float],
        documents: dict[str, Any],
        artifact_dir: str | None,
        tags: dict[str, str],
    ) -> None:
        self._check_open()

    def log_comparison(self, comparison: dict[str, Any]) -> None:
        self._check_open()

    def flush(self) -> None:
        pass

    def finish(self, status: str) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise TrackerClosed(f"the tracker of {self.parent_run_id!r} is finished")
