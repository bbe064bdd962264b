"""The executors an executor configuration names, made in one place: its nodes are opened by
the kind of executor registered for its type (`autotune.execution.registry`), and the kinds of
node a tuning runs on are chosen among theirs the same way whatever runs the trials."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import overload

from autotune.core.contract import NodeKind
from autotune.core.contract.hardware import FINGERPRINT
from autotune.execution.base import Executor, Nodes
from autotune.execution.config import BaseExecutorConfig, ReplayConfig
from autotune.execution.registry import executor_kind
from autotune.execution.replay import ReplayExecutor
from autotune.requests.request import DEFAULT_NODE_WAIT_S
from autotune.space.hardware import one_kind, select_kinds


def open_nodes(config: BaseExecutorConfig, node_wait_s: float = DEFAULT_NODE_WAIT_S) -> Nodes:
    """The nodes `config` reaches, surveyed (a Ray cluster joined or started, this process's
    machine probed, a recorded table read, or whatever a plugin's executor reaches)."""
    return executor_kind(config.type).open_nodes(config, node_wait_s)


@overload
def make_executors(
    config: ReplayConfig,
    target: str | None = None,
    several: bool = True,
    node_wait_s: float = DEFAULT_NODE_WAIT_S,
    on_note: Callable[[str], None] | None = None,
) -> list[ReplayExecutor]: ...


@overload
def make_executors(
    config: BaseExecutorConfig,
    target: str | None = None,
    several: bool = True,
    node_wait_s: float = DEFAULT_NODE_WAIT_S,
    on_note: Callable[[str], None] | None = None,
) -> Sequence[Executor]: ...


def make_executors(
    config: BaseExecutorConfig,
    target: str | None = None,
    several: bool = True,
    node_wait_s: float = DEFAULT_NODE_WAIT_S,
    on_note: Callable[[str], None] | None = None,
) -> Sequence[Executor]:
    """One executor for each kind of node the trials run on (`target` keeps one of them).
    Without `several`, nodes of several kinds and no target are bad input, refused before
    any trial slot starts. A target that is a kind's fingerprint (a job's kind, fixed when it
    was accepted) is waited for up to `node_wait_s` while no node of it is there (`on_note`
    is told so)."""
    nodes = open_nodes(config, node_wait_s)
    executors: list[Executor] = []
    try:
        if target is not None and FINGERPRINT.fullmatch(target):
            nodes.await_kind(target, on_note)
        for kind in choose_kinds(nodes.kinds(), target, several):
            executors.append(nodes.executor(kind))
    except BaseException:
        for executor in executors:
            executor.close()
        raise
    finally:
        nodes.release()  # a failed start stops a Ray started here
    return executors


def choose_kinds(kinds: list[NodeKind], target: str | None, several: bool) -> list[NodeKind]:
    """The kinds a tuning runs on (`select_kinds`); without `several`, the one kind
    (`one_kind`)."""
    return select_kinds(kinds, target) if several else [one_kind(kinds, target)]


def survey(config: BaseExecutorConfig) -> list[NodeKind]:
    """The kinds of node trials would run on, without starting any: a Ray cluster's nodes
    (each probed on itself), or without an address this machine (where a local Ray would run
    them as well), a recorded table's stand-in machine, or a plugin's executor's nodes."""
    return executor_kind(config.type).survey(config)
