"""What earlier studies of a model left in a storage: the int8 sensitivity rankings of the
most recent one that measured them (what `autotune space --request` shows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from autotune.core.contract.trials import SensitivityTable
from autotune.core.errors import RequestError
from autotune.results.databases import require_existing
from autotune.results.optuna_store import OPTUNA_TABLES, rdb_storage
from autotune.results.sensitivities import sensitivities_in


@dataclass(frozen=True)
class StudySensitivity:
    """The int8 sensitivity rankings a study of the model keeps, and when it started."""

    study: str
    started: datetime | None
    tables: list[SensitivityTable]


def latest_sensitivity(storage: str, model_sha256: str) -> StudySensitivity | None:
    """The rankings of the most recently started study of the model (by its sha256) in
    `storage` that keeps any; None where there is none, or no such storage (a read creates
    nothing)."""
    import optuna

    try:
        require_existing(storage, "storage", OPTUNA_TABLES, "autotune's studies")
    except RequestError:
        return None
    rdb = rdb_storage(storage, create=False)
    try:
        summaries = optuna.get_all_study_summaries(rdb, include_best_trial=False)
    finally:
        rdb.engine.dispose()
    found = [
        StudySensitivity(s.study_name, s.datetime_start, sensitivities_in(s.user_attrs))
        for s in summaries
        if s.user_attrs.get("model_sha256") == model_sha256
    ]
    found = [f for f in found if f.tables]
    if not found:
        return None
    return max(found, key=lambda f: f.started or datetime.min)
