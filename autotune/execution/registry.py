"""The kinds of executor, each registered under its configuration's `type`: autotune's own
(`ray`, `in_process`, `replay`, registered here) and those installed plugins add through the
entry-point group `autotune.executors` (`autotune.core.plugins`), loaded once, after
autotune's own, at the end of this module. A kind is its configuration model
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
from autotune.execution import ray_executor
from autotune.execution.base import Executor, Nodes, trial_memory_limit_mb
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
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_cluster import RayCluster
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable
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


@dataclass
class RayNodes:
    """A Ray cluster's trial nodes: one `RayExecutor` for each kind chosen. The builder's hold
    on the cluster keeps a Ray started here alive while the executors start."""

    cluster: RayCluster
    memory_limit_mb: int | None
    node_wait_s: float

    def kinds(self) -> list[NodeKind]:
        return self.cluster.kinds

    def await_kind(self, fingerprint: str, on_note: Callable[[str], None] | None) -> None:
        self.cluster.await_kind(fingerprint, self.node_wait_s, on_note)

    def executor(self, kind: NodeKind) -> Executor:
        return ray_executor.RayExecutor(
            memory_limit_mb=self.memory_limit_mb,
            target=kind.fingerprint,
            cluster=self.cluster,
            node_wait_s=self.node_wait_s,
        )

    def release(self) -> None:
        self.cluster.release()


def open_ray(config: RayConfig, node_wait_s: float) -> RayNodes:
    # On this machine each slot's actor gets its share of the memory available now; a
    # cluster's nodes are not this machine's to share out.
    slots = config.workers if isinstance(config.workers, int) else 1
    limit = None if config.address else trial_memory_limit_mb(slots)
    cluster = RayCluster(config.address, config.workers)
    cluster.acquire()
    return RayNodes(cluster, limit, node_wait_s)


def survey_ray(config: RayConfig) -> list[NodeKind]:
    """A Ray cluster's nodes, each probed on itself, or without an address this machine."""
    return ray_executor.survey_kinds(config.address, config.workers)


def open_in_process(config: InProcessConfig, node_wait_s: float) -> OneExecutor:
    return OneExecutor(InProcessExecutor())


def survey_in_process(config: InProcessConfig) -> list[NodeKind]:
    """This machine, where a local Ray would run the trials as well."""
    return ray_executor.survey_kinds(None)


def replay_executor(config: ReplayConfig) -> ReplayExecutor:
    return ReplayExecutor(ReplayTable.load(config.table), config.workers)


def open_replay(config: ReplayConfig, node_wait_s: float) -> OneExecutor:
    return OneExecutor(replay_executor(config))


register_executor(RayConfig, open_ray, survey_ray)
register_executor(InProcessConfig, open_in_process, survey_in_process)
register_executor(ReplayConfig, open_replay)
load_plugins(EXECUTORS_GROUP)
