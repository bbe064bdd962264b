"""An executor kind of the tests' own, registered by its configuration model: the recorded
digits table's trials on simulated slots under the type `shelf`, and what opened it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from autotune.execution.config import BaseExecutorConfig
from autotune.execution.registry import OneExecutor
from autotune.execution.replay import ReplayExecutor
from autotune.execution.replay_table import ReplayTable
from tests.executor_fixtures import DIGITS_TABLE


class ShelfConfig(BaseExecutorConfig):
    """The recorded digits table's trials on `slots` simulated slots, under a type of its own."""

    type: Literal["shelf"] = "shelf"
    slots: Annotated[int, Field(ge=1)] = 1


opened: list[tuple[ShelfConfig, float]] = []


def open_shelf(config: ShelfConfig, node_wait_s: float) -> OneExecutor:
    opened.append((config, node_wait_s))
    return OneExecutor(ReplayExecutor(ReplayTable.load(DIGITS_TABLE), config.slots))
