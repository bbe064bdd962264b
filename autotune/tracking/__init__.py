"""What a study records: the `Tracker` protocol, MLflow's implementation and a null one, and
the pure helpers (Pareto table and plot, a re-tune's comparison, contention figures)."""

from autotune.tracking.base import NullTracker, Tracker, TrackerClosed
from autotune.tracking.mlflow import (
    PARENT_TAG,
    PREVIOUS_RUN_TAG,
    ROLE_TAG,
    ROUND_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    MlflowTracker,
    artifact_location,
    is_database_store,
)
from autotune.tracking.report import (
    comparison_figures,
    contention_figures,
    contention_tags,
    is_number,
    pareto_csv,
    trial_log,
)

__all__ = [
    "PARENT_TAG",
    "PREVIOUS_RUN_TAG",
    "ROLE_TAG",
    "ROUND_TAG",
    "STUDY_TAG",
    "TRIAL_TAG",
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "TrackerClosed",
    "artifact_location",
    "comparison_figures",
    "contention_figures",
    "contention_tags",
    "is_database_store",
    "is_number",
    "pareto_csv",
    "trial_log",
]
