"""Where trials run, as typed configuration: one model per kind of executor, told apart by
`type`. The command line's and the service's flags become one of these in `executor_config`;
`autotune.execution.build.make_executors` makes the executors a configuration names."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from autotune.core.errors import RequestError

# Trial slots on each kind of node, or 'auto': every slot the nodes hold.
SlotCount = Annotated[int, Field(ge=1)] | Literal["auto"]

# The names `--executor` takes (a replay is asked for with `--replay`).
EXECUTOR_NAMES = ("ray", "inprocess")


class RayConfig(BaseModel):
    """Trials on Ray actors: a cluster joined at `address`, or a Ray started on this machine."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ray"] = "ray"
    address: str | None = None
    workers: SlotCount = 1

    def start_note(self) -> str:
        where = "the Ray cluster" if self.address else "Ray"
        return f"start: starting {where}, probing the trial nodes' hardware"


class InProcessConfig(BaseModel):
    """Trials in the coordinator's own process, one at a time (tests, debugging)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["in_process"] = "in_process"

    def start_note(self) -> str:
        return "start: probing the trial nodes' hardware"


class ReplayConfig(BaseModel):
    """Trials answered from a recorded table on `workers` simulated slots."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["replay"] = "replay"
    table: Path
    workers: Annotated[int, Field(ge=1)] = 1


ExecutorConfig = Annotated[RayConfig | InProcessConfig | ReplayConfig, Field(discriminator="type")]

_ADAPTER: TypeAdapter[ExecutorConfig] = TypeAdapter(ExecutorConfig)


def parse_executor_config(raw: Any) -> ExecutorConfig:
    """An executor configuration from a mapping; the first problem found is a RequestError
    naming the field (`executor.workers`), the rule and the value."""
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(["executor", *(str(part) for part in first["loc"])])
        raise RequestError(field, first["msg"], first.get("input")) from None


def executor_config(
    executor: str,
    address: str | None = None,
    workers: int | Literal["auto"] = 1,
    replay: Path | None = None,
) -> ExecutorConfig:
    """The configuration the flags name: `--executor ray|inprocess`, `--ray-address`,
    `--workers` and `--replay` (a recorded table answers the trials, on `workers` simulated
    slots, one where they are 'auto')."""
    if executor not in EXECUTOR_NAMES:
        rule = f"must be {' or '.join(repr(name) for name in EXECUTOR_NAMES)}"
        raise RequestError("executor", rule, executor)
    if replay is not None:
        slots = workers if isinstance(workers, int) else 1
        return parse_executor_config({"type": "replay", "table": replay, "workers": slots})
    if executor == "inprocess":
        return InProcessConfig()
    return parse_executor_config({"type": "ray", "address": address, "workers": workers})
