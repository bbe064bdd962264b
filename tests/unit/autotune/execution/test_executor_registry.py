"""The kinds of executor (`autotune.execution.registry`): one registered by its configuration
model is read from a mapping and opened by the builder as autotune's own are; a type there is
none of, a field its model does not have and a plugin that cannot be loaded are refused in
words."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ConfigDict

from autotune.core import plugins
from autotune.core.errors import RequestError
from autotune.core.plugins import EXECUTORS_GROUP, PluginWarning, load_entry_points
from autotune.execution import build, built_in, registry
from autotune.execution.config import BaseExecutorConfig, RayConfig
from autotune.execution.registry import (
    OneExecutor,
    executor_types,
    parse_executor_config,
    register_executor,
)
from autotune.execution.replay import ReplayExecutor
from tests.shelf_executor_kind import ShelfConfig, open_shelf, opened


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as it is, to add to within one test."""
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    opened.clear()
    yield


@pytest.fixture
def shelf(own_registry: None) -> None:
    register_executor(ShelfConfig, open_shelf)


def test_a_registered_kind_is_read_opened_and_surveyed_by_its_type(shelf: None) -> None:
    config = parse_executor_config({"type": "shelf", "slots": 3})
    assert config == ShelfConfig(slots=3)
    (executor,) = build.make_executors(config, node_wait_s=5.0)
    assert isinstance(executor, ReplayExecutor) and executor.slots == 3
    assert opened == [(config, 5.0)]
    (kind,) = build.survey(config)
    assert kind.nodes[0].slots == 3  # surveyed by opening its nodes, then releasing them
    assert executor_types() == ["ray", "in_process", "replay", "shelf"]


def test_a_type_there_is_none_of_lists_the_registered_ones(shelf: None) -> None:
    with pytest.raises(RequestError) as refused:
        parse_executor_config({"type": "gpu", "slots": 2})
    assert (refused.value.field, refused.value.value) == ("executor.type", "gpu")
    assert refused.value.rule == "must be one of 'ray', 'in_process', 'replay', 'shelf'"
    assert str(refused.value) == (
        "executor.type: must be one of 'ray', 'in_process', 'replay', 'shelf' (got 'gpu')"
    )


@pytest.mark.parametrize(
    ("raw", "field", "rule"),
    [
        ({"type": "shelf", "colour": "red"}, "executor.shelf.colour", "Extra inputs"),
        ({"type": "shelf", "slots": 0}, "executor.shelf.slots", "greater than or equal to 1"),
        ({"slots": 2}, "executor.type", "must be one of"),
    ],
)
def test_a_registered_kinds_fields_are_checked_by_its_model(
    shelf: None, raw: dict[str, object], field: str, rule: str
) -> None:
    with pytest.raises(RequestError) as refused:
        parse_executor_config(raw)
    assert refused.value.field == field
    assert rule in refused.value.rule


def test_a_type_is_registered_once(shelf: None) -> None:
    with pytest.raises(ValueError, match="an executor of type 'shelf' is already registered"):
        register_executor(ShelfConfig, open_shelf)
    with pytest.raises(ValueError, match="'ray' is already registered"):
        register_executor(RayConfig, built_in.open_ray)


class Untyped(BaseExecutorConfig):
    type: str = "untyped"


class Tolerant(BaseExecutorConfig):
    model_config = ConfigDict(extra="allow")

    type: Literal["tolerant"] = "tolerant"


def never_opened(config: BaseExecutorConfig, node_wait_s: float) -> OneExecutor:
    raise AssertionError("a kind that is refused is never opened")


def test_a_model_must_name_its_type_and_refuse_fields_it_does_not_have(
    own_registry: None,
) -> None:
    with pytest.raises(ValueError, match="Untyped must declare type: Literal"):
        register_executor(Untyped, never_opened)
    with pytest.raises(ValueError, match=r"Tolerant must refuse fields .*extra='forbid'"):
        register_executor(Tolerant, never_opened)
    assert "untyped" not in executor_types() and "tolerant" not in executor_types()


def test_a_plugin_executor_that_cannot_be_imported_is_a_warning(own_registry: None) -> None:
    broken = EntryPoint(name="cloud", value="no_such_executor_module", group=EXECUTORS_GROUP)
    with pytest.warns(PluginWarning) as warned:
        assert load_entry_points([broken]) == []
    [warning] = warned
    assert str(warning.message) == (
        "plugin 'cloud' (autotune.executors = 'no_such_executor_module', from no installed "
        "distribution) was not loaded: ModuleNotFoundError: No module named "
        "'no_such_executor_module'"
    )
    assert executor_types() == ["ray", "in_process", "replay"]


def test_the_executors_group_loads_a_plugin_that_registers_a_kind(
    own_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shelf_executor.py").write_text(
        "from tests.shelf_executor_kind import ShelfConfig, open_shelf\n"
        "from autotune.execution.registry import register_executor\n\n"
        "register_executor(ShelfConfig, open_shelf)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_loaded_groups", set())

    def installed(group: str) -> list[EntryPoint]:
        return [EntryPoint(name="shelf", value="shelf_executor", group=group)]

    monkeypatch.setattr(plugins, "entry_points", installed)
    assert plugins.load_plugins(EXECUTORS_GROUP) == ["shelf"]
    assert parse_executor_config({"type": "shelf"}) == ShelfConfig()


def test_a_plugin_that_takes_a_built_in_type_is_a_warning_and_changes_nothing(
    own_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ray_impostor.py").write_text(
        "from autotune.execution.config import RayConfig\n"
        "from autotune.execution.registry import register_executor\n\n"
        "register_executor(RayConfig, lambda config, wait_s: None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    impostor = EntryPoint(name="impostor", value="ray_impostor", group=EXECUTORS_GROUP)
    with pytest.warns(PluginWarning, match="'impostor'.*an executor of type 'ray' is already"):
        assert load_entry_points([impostor]) == []
    assert registry.executor_kind("ray").open_nodes is built_in.open_ray
