"""Where trials run, as typed configuration: one model per kind of executor, each a
`BaseExecutorConfig` named by its `type` (the name its kind is registered under,
`autotune.execution.registry`, where plugins add kinds of their own and
`parse_executor_config` reads any of them, `executor_config` makes one from the command
line's and the service's flags);
`autotune.execution.build.make_executors` makes the executors a configuration names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.core.errors import RequestError

# Trial slots on each kind of node, or 'auto': every slot the nodes hold.
SlotCount = Annotated[int, Field(ge=1)] | Literal["auto"]

# The names `--executor` takes for autotune's own executors (a replay is asked for with
# `--replay`); an installed plugin's executor is named by its type.
EXECUTOR_NAMES = ("ray", "inprocess")
BUILT_IN_TYPES = ("ray", "in_process", "replay")

ConfigT = TypeVar("ConfigT", bound="BaseExecutorConfig")


class BaseExecutorConfig(BaseModel):
    """What every kind of executor's configuration is: a model that refuses fields it does not
    have, whose `type` (`type: Literal["<name>"] = "<name>"` in each kind) says which kind."""

    model_config = ConfigDict(extra="forbid")

    type: str

    def start_note(self) -> str:
        return "start: probing the trial nodes' hardware"


class RayConfig(BaseExecutorConfig):
    """Trials on Ray actors: a cluster joined at `address`, or a Ray started on this machine."""

    type: Literal["ray"] = "ray"
    address: str | None = None
    workers: SlotCount = 1

    def start_note(self) -> str:
        where = "the Ray cluster" if self.address else "Ray"
        return f"start: starting {where}, probing the trial nodes' hardware"


class InProcessConfig(BaseExecutorConfig):
    """Trials in the coordinator's own process, one at a time (tests, debugging)."""

    type: Literal["in_process"] = "in_process"


class ReplayConfig(BaseExecutorConfig):
    """Trials answered from a recorded table on `workers` simulated slots."""

    type: Literal["replay"] = "replay"
    table: Path
    workers: Annotated[int, Field(ge=1)] = 1


def validated(config: type[ConfigT], raw: Mapping[str, Any]) -> ConfigT:
    """`raw` as a `config`; the first problem found is a RequestError naming the field
    (`executor.ray.workers`), the rule and the value."""
    try:
        return config.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(["executor", str(raw["type"]), *(str(part) for part in first["loc"])])
        raise RequestError(field, first["msg"], first.get("input")) from None
