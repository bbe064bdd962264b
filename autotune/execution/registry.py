"""The kinds of executor, each registered under its configuration's `type`: autotune's own
(`ray`, `in_process`, `replay`, registered in `autotune.execution.built_in`) and those installed
plugins add, all through the entry-point group `autotune.executors` (`autotune.core.plugins`),
loaded once, autotune's own first, at the end of this module. A kind is its configuration model
(`BaseExecutorConfig`) and how the nodes a configuration reaches are opened (`Nodes`);
`autotune.execution.build` makes the executors from those nodes the same way whatever the
kind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from autotune.core.contract import NodeKind
from autotune.core.errors import RequestError
from autotune.core.plugins import EXECUTORS_GROUP, load_plugins
from autotune.execution.base import Executor, Nodes
from autotune.execution.config import (
    BUILT_IN_TYPES,
    EXECUTOR_NAMES,
    BaseExecutorConfig,
    ConfigT,
    InProcessConfig,
    RayConfig,
    ReplayConfig,
    validated,
)
from autotune.requests.request import DEFAULT_NODE_WAIT_S


@dataclass(frozen=True)
class ExecutorKind:
    """A registered kind of executor: `open_nodes(config, node_wait_s)` opens the nodes a
    configuration reaches; `survey(config)` gives their kinds without starting any."""

    config: type[BaseExecutorConfig]
    open_nodes: Callable[[Any, float], Nodes]
    survey: Callable[[Any], list[NodeKind]]


_KINDS: dict[str, ExecutorKind] = {}


def register_executor(
    config: type[ConfigT],
    open_nodes: Callable[[ConfigT, float], Nodes],
    survey: Callable[[ConfigT], list[NodeKind]] | None = None,
) -> None:
    """Register a kind of executor under `config`'s type (its `type: Literal["<name>"] =
    "<name>"`). Without `survey`, the kinds are those of the nodes opened, then released. A
    type already registered, or a model that does not name its type so, is a ValueError."""
    name = config_type(config)
    if name in _KINDS:
        raise ValueError(f"an executor of type {name!r} is already registered")
    _KINDS[name] = ExecutorKind(config, open_nodes, survey or _OpenedSurvey(open_nodes))


def config_type(config: type[BaseExecutorConfig]) -> str:
    """The type a configuration model names, refused unless it is a literal that is also the
    default and the model refuses fields it does not have."""
    declared = config.model_fields.get("type")
    literal = declared is not None and get_origin(declared.annotation) is Literal
    if declared is None or not literal or get_args(declared.annotation) != (declared.default,):
        raise ValueError(f"{config.__name__} must declare type: Literal['<name>'] = '<name>'")
    if config.model_config.get("extra") != "forbid":
        raise ValueError(f"{config.__name__} must refuse fields it does not have (extra='forbid')")
    return str(declared.default)


def executor_kind(name: object) -> ExecutorKind:
    """The kind registered under `name`; a RequestError on `executor.type` listing the types
    registered where there is none."""
    if not isinstance(name, str) or name not in _KINDS:
        rule = f"must be one of {', '.join(map(repr, executor_types()))}"
        raise RequestError("executor.type", rule, name)
    return _KINDS[name]


def parse_executor_config(raw: Any) -> BaseExecutorConfig:
    """An executor configuration from a mapping, validated by the model registered for its
    `type`; the first problem found is a RequestError naming the field (`executor.type`,
    `executor.ray.workers`), the rule and the value."""
    if not isinstance(raw, Mapping):
        raise RequestError("executor", "must be a mapping with a 'type'", raw)
    return validated(executor_kind(raw.get("type")).config, raw)


def executor_types() -> list[str]:
    """The registered types, autotune's own first."""
    return list(_KINDS)


def executor_names() -> list[str]:
    """What `--executor` takes: 'ray', 'inprocess' and each installed plugin's executor type."""
    return [*EXECUTOR_NAMES, *(name for name in _KINDS if name not in BUILT_IN_TYPES)]


def executor_config(
    executor: str,
    address: str | None = None,
    workers: int | Literal["auto"] = 1,
    replay: Path | None = None,
) -> BaseExecutorConfig:
    """The configuration the flags name: `--executor ray|inprocess|<a plugin's type>`,
    `--ray-address`, `--workers` and `--replay` (a recorded table answers the trials, on
    `workers` simulated slots, one where they are 'auto'). A plugin's executor is configured
    by its model's defaults."""
    names = executor_names()
    if executor not in names:
        raise RequestError("executor", f"must be one of {', '.join(map(repr, names))}", executor)
    if replay is not None:
        slots = workers if isinstance(workers, int) else 1
        return validated(ReplayConfig, {"type": "replay", "table": replay, "workers": slots})
    if executor == "inprocess":
        return InProcessConfig()
    if executor == "ray":
        return validated(RayConfig, {"type": "ray", "address": address, "workers": workers})
    return parse_executor_config({"type": executor})


@dataclass
class _OpenedSurvey:
    """A kind's survey where it gives none: its nodes opened, asked their kinds, released."""

    open_nodes: Callable[[Any, float], Nodes]

    def __call__(self, config: BaseExecutorConfig) -> list[NodeKind]:
        nodes = self.open_nodes(config, DEFAULT_NODE_WAIT_S)
        try:
            return nodes.kinds()
        finally:
            nodes.release()


@dataclass
class OneExecutor:
    """The nodes of an executor made whole (this process, a recorded table): one kind, whose
    nodes never come or go."""

    made: Executor
    handed_out: bool = field(default=False, init=False)

    def kinds(self) -> list[NodeKind]:
        return self.made.kinds()

    def await_kind(self, fingerprint: str, on_note: Callable[[str], None] | None) -> None:
        return None

    def executor(self, kind: NodeKind) -> Executor:
        self.handed_out = True
        return self.made

    def release(self) -> None:
        if not self.handed_out:
            self.made.close()


load_plugins(EXECUTORS_GROUP)
