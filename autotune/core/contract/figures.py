"""The map of measured figures that `TrialMetrics` and `RoundFigures` carry beside their fixed
fields: every other measured metric, by name, each a metric of the registry that names its
figure meter (`autotune.core.metrics.Metric.meter`), its value a finite number.

A trial record holds every metric as a key of its own (metric name -> value), derived ones
included, and so does a dump of these models: the map's figures are dumped beside the fields,
and a registered measured metric's key beside the fields is read back into the map. A record
made before the map existed loads with an empty map."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    FiniteFloat,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from autotune.core.contract.refs import Strict
from autotune.core.metrics import mapped_metrics


def _registered_measured(name: str) -> str:
    if name not in mapped_metrics():
        raise ValueError(
            "must be a measured metric of the registry that names its figure meter "
            f"(registered: {sorted(mapped_metrics())}), not {name!r}"
        )
    return name


def _not_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


MeasuredName = Annotated[str, AfterValidator(_registered_measured)]
MeasuredValue = Annotated[FiniteFloat, BeforeValidator(_not_boolean)]


class CarriesMeasured(Strict):
    measured: dict[MeasuredName, MeasuredValue] = Field(
        default_factory=dict,
        description="the measured metrics besides the fixed fields, by metric name "
        "(autotune.core.metrics.mapped_metrics)",
    )

    @model_validator(mode="before")
    @classmethod
    def _gather_measured(cls, data: Any) -> Any:
        """A registered measured metric's key beside the fields goes into the map."""
        if not isinstance(data, dict):
            return data
        mapped = mapped_metrics()
        flat = {k: v for k, v in data.items() if k in mapped and k not in cls.model_fields}
        if not flat:
            return data
        rest = {k: v for k, v in data.items() if k not in flat}
        return {**rest, "measured": {**rest.get("measured", {}), **flat}}

    @model_serializer(mode="wrap")
    def _measured_beside_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        measured = dumped.pop("measured", {})
        return {**dumped, **measured}

    def figure(self, name: str) -> Any:
        """A metric's figure: its field's, else the map's (NaN for a measured metric that
        this measurement did not give)."""
        if name in type(self).model_fields:
            return getattr(self, name)
        _registered_measured(name)
        return self.measured.get(name, math.nan)
