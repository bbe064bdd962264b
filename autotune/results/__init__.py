"""What a study records, and where: typed trial records behind the `ResultStore` interface."""

from autotune.results.optuna_store import OptunaStore, opened_store
from autotune.results.records import (
    StoredRevalidation,
    StudyIdentity,
    TrialEnding,
    TrialMarks,
    TrialRecord,
)
from autotune.results.store import ResultStore

__all__ = [
    "OptunaStore",
    "ResultStore",
    "StoredRevalidation",
    "StudyIdentity",
    "TrialEnding",
    "TrialMarks",
    "TrialRecord",
    "opened_store",
]
