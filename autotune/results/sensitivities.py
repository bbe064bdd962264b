"""A study's int8 sensitivity rankings, kept once per ranked model and mode among the study's
attributes (`OptunaStore.save_sensitivity`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.core.contract.trials import SensitivityTable

SENSITIVITY_PREFIX = "int8_sensitivity:"


def sensitivity_key(table: SensitivityTable) -> str:
    of = "" if table.ranked == "onnx" else f":{table.ranked}"
    return f"{SENSITIVITY_PREFIX}{table.model_sha256}:{table.mode}{of}"


def sensitivities_in(attrs: Mapping[str, Any]) -> list[SensitivityTable]:
    """The rankings among a study's attributes, by model and mode."""
    return [
        SensitivityTable.model_validate(attrs[key])
        for key in sorted(attrs)
        if key.startswith(SENSITIVITY_PREFIX)
    ]
