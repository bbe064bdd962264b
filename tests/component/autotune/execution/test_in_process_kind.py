"""The in-process executor's kind of node is made once, from its worker's probe of this
machine, and is the kind every later question gets."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core.contract import NodeKind
from autotune.execution.base import LOCAL_NODE
from autotune.execution.in_process import InProcessExecutor
from tests.workers_support import digits_workload


def test_the_kind_is_made_once_and_handed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[NodeKind] = []
    one_node = NodeKind.one_node

    def counted(profile: Any, node_id: str, slots: int = 1) -> NodeKind:
        made.append(one_node(profile, node_id, slots))
        return made[-1]

    monkeypatch.setattr(NodeKind, "one_node", counted)
    executor = InProcessExecutor()
    try:
        surveyed = executor.kinds()
        inspected = executor.inspect(digits_workload()).kinds
    finally:
        executor.close()
    assert len(made) == 1
    assert surveyed == inspected == made
    (kind,) = made
    assert [node.node_id for node in kind.nodes] == [LOCAL_NODE]
