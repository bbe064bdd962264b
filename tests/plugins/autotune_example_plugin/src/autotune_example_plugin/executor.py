"""The executor type `example_in_process` (entry point group `autotune.executors`): the
trials in the coordinator's own process, on autotune's `InProcessExecutor`, with a memory cap
per trial of its own choosing and a start note saying whose executor runs them. An executor of
one's own implements `autotune.execution.base.Executor` and registers its configuration model
and how its nodes are opened (`OneExecutor` for a machine whose one kind never changes, a
`Nodes` of its own where nodes of several kinds come and go) in the same way."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from autotune.execution.config import BaseExecutorConfig
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.registry import OneExecutor, register_executor


class ExampleInProcessConfig(BaseExecutorConfig):
    """Trials in this process, each capped at `memory_limit_mb` (autotune's share of the
    memory available where it is not given)."""

    type: Literal["example_in_process"] = "example_in_process"
    memory_limit_mb: Annotated[int, Field(ge=256)] | None = None

    def start_note(self) -> str:
        cap = f"{self.memory_limit_mb} MB" if self.memory_limit_mb else "a share of the memory"
        return f"start: example_in_process runs the trials in this process, {cap} each"


def open_example_in_process(config: ExampleInProcessConfig, node_wait_s: float) -> OneExecutor:
    return OneExecutor(InProcessExecutor(config.memory_limit_mb))


register_executor(ExampleInProcessConfig, open_example_in_process)
