"""Where trials run, as typed configuration: the flags' one translation (`executor_config`),
its validation, and the one builder that makes executors from it (`make_executors`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import RequestError
from autotune.execution import build, built_in, ray_executor
from autotune.execution.config import InProcessConfig, RayConfig, ReplayConfig
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.registry import executor_config, parse_executor_config
from autotune.execution.replay import ReplayExecutor
from autotune.service.settings import ServiceSettings
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR
from autotune.tuning import TuneOptions
from tests.executor_fixtures import DIGITS_TABLE

runner = CliRunner()


def kind_of(profile_name: str) -> NodeKind:
    profile = load_profile(SPACES_DIR / "profiles" / profile_name)
    node = NodeInfo(node_id=profile_name, hostname="h", labels={}, cpus=8, gpus=1, slots=1)
    return NodeKind(profile=profile, nodes=[node])


A100, H200 = kind_of("a100.json"), kind_of("h200x8.json")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"type": "ray", "address": "ray://head:10001", "workers": "auto"},
            RayConfig(address="ray://head:10001", workers="auto"),
        ),
        ({"type": "ray"}, RayConfig(address=None, workers=1)),
        ({"type": "in_process"}, InProcessConfig()),
        (
            {"type": "replay", "table": "digits.csv", "workers": 3},
            ReplayConfig(table=Path("digits.csv"), workers=3),
        ),
    ],
)
def test_each_type_of_executor_configuration_parses(raw: dict[str, Any], expected: Any) -> None:
    assert parse_executor_config(raw) == expected


def test_a_type_that_is_no_executor_is_named_with_the_types_there_are() -> None:
    with pytest.raises(RequestError) as refused:
        parse_executor_config({"type": "gpu"})
    assert (refused.value.field, refused.value.value) == ("executor.type", "gpu")
    assert refused.value.rule == "must be one of 'ray', 'in_process', 'replay'"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"type": "in_process", "address": "ray://head:10001"}, "executor.in_process.address"),
        ({"type": "ray", "slots": 2}, "executor.ray.slots"),
        ({"type": "replay", "table": "t.csv", "seed": 1}, "executor.replay.seed"),
    ],
)
def test_a_field_the_type_does_not_have_is_refused(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_executor_config(raw)
    assert refused.value.field == field
    assert "Extra inputs are not permitted" in refused.value.rule


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "ray", "workers": 0},
        {"type": "ray", "workers": "all"},
        {"type": "replay", "table": "t.csv", "workers": "auto"},
        {"type": "replay"},
    ],
)
def test_bad_slots_and_a_replay_without_its_table_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(RequestError) as refused:
        parse_executor_config(raw)
    assert refused.value.field.startswith(f"executor.{raw['type']}.")


def test_the_flags_become_one_configuration() -> None:
    assert executor_config("ray", "ray://head:10001", "auto") == RayConfig(
        address="ray://head:10001", workers="auto"
    )
    assert executor_config("inprocess", "ray://head:10001", 4) == InProcessConfig()
    table = Path("digits.csv")
    assert executor_config("ray", None, 3, table) == ReplayConfig(table=table, workers=3)
    assert executor_config("inprocess", None, "auto", table) == ReplayConfig(table=table)


@pytest.mark.parametrize("name", ["bogus", "in_process", "replay", "Ray"])
def test_an_executor_name_the_flag_does_not_take_is_refused(name: str) -> None:
    with pytest.raises(RequestError) as refused:
        executor_config(name, replay=Path("digits.csv"))
    assert (refused.value.field, refused.value.value) == ("executor", name)
    assert refused.value.rule == "must be one of 'ray', 'inprocess'"


def test_tune_options_refuse_a_bad_executor_as_they_are_made() -> None:
    with pytest.raises(RequestError, match="executor"):
        TuneOptions(executor="bogus")
    assert TuneOptions(executor="inprocess").executor_config() == InProcessConfig()


def test_the_tune_command_refuses_a_bad_executor(write_request: Callable[..., Path]) -> None:
    result = runner.invoke(app, ["tune", str(write_request()), "--executor", "bogus"])
    assert result.exit_code == 2, result.output
    assert "executor:" in result.output and "bogus" in result.output


def test_the_in_process_configuration_builds_this_machines_executor() -> None:
    (executor,) = build.make_executors(InProcessConfig(), several=False)
    try:
        assert isinstance(executor, InProcessExecutor)
        assert executor.kinds()[0].fingerprint
    finally:
        executor.close()


def test_the_in_process_executor_refuses_a_target_this_machine_is_not() -> None:
    with pytest.raises(RequestError) as refused:
        build.make_executors(InProcessConfig(), target="zone=nowhere")
    assert refused.value.field == "target"


def test_the_replay_configuration_builds_its_tables_executor() -> None:
    (executor,) = build.make_executors(ReplayConfig(table=DIGITS_TABLE, workers=2))
    assert isinstance(executor, ReplayExecutor)
    assert executor.table.path == DIGITS_TABLE
    assert executor.slots == 2
    assert executor.kinds()[0].nodes[0].slots == 2


class FakeCluster:
    """A Ray cluster's surveyed kinds, without Ray: what the builder asks of it, recorded."""

    made: list[FakeCluster] = []

    def __init__(self, address: str | None, workers: int | str) -> None:
        self.address, self.workers = address, workers
        self.kinds = [A100, H200]
        self.users = 0
        self.awaited: list[tuple[str, float]] = []
        FakeCluster.made.append(self)

    def acquire(self) -> None:
        self.users += 1

    def release(self) -> None:
        self.users -= 1

    def await_kind(self, fingerprint: str, wait_s: float, on_note: object) -> None:
        self.awaited.append((fingerprint, wait_s))


class FakeRayExecutor:
    def __init__(self, **given: Any) -> None:
        self.given = given
        self.closed = False
        given["cluster"].acquire()

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> list[FakeCluster]:
    FakeCluster.made = []
    monkeypatch.setattr(built_in, "RayCluster", FakeCluster)
    monkeypatch.setattr(ray_executor, "RayExecutor", FakeRayExecutor)
    return FakeCluster.made


def test_the_ray_configuration_reaches_the_cluster_and_one_executor_a_kind(
    fake_ray: list[FakeCluster],
) -> None:
    config = RayConfig(address="ray://head:10001", workers="auto")
    executors = build.make_executors(config, node_wait_s=7.0)
    (cluster,) = fake_ray
    assert (cluster.address, cluster.workers) == ("ray://head:10001", "auto")
    given = [executor.given for executor in executors]  # type: ignore[attr-defined]
    assert [g["target"] for g in given] == [A100.fingerprint, H200.fingerprint]
    assert all(g["cluster"] is cluster and g["node_wait_s"] == 7.0 for g in given)
    assert all(g["memory_limit_mb"] is None for g in given)  # a cluster's memory is not ours
    assert cluster.users == 2  # the builder's hold is released; each executor holds its own


def test_a_kinds_fingerprint_is_waited_for_and_chooses_one_kind(
    fake_ray: list[FakeCluster],
) -> None:
    (executor,) = build.make_executors(RayConfig(), H200.fingerprint, several=False)
    (cluster,) = fake_ray
    assert cluster.awaited == [(H200.fingerprint, build.DEFAULT_NODE_WAIT_S)]
    assert executor.given["target"] == H200.fingerprint  # type: ignore[attr-defined]
    assert executor.given["memory_limit_mb"] is not None  # type: ignore[attr-defined]


def test_several_kinds_without_a_target_are_refused_where_one_is_wanted(
    fake_ray: list[FakeCluster],
) -> None:
    with pytest.raises(RequestError) as refused:
        build.make_executors(RayConfig(), several=False)
    assert refused.value.field == "target"
    (cluster,) = fake_ray
    assert cluster.users == 0  # a Ray started here would stop


def test_service_settings_configure_their_executor_once() -> None:
    assert ServiceSettings(executor="inprocess").executor_config() == InProcessConfig()
    settings = ServiceSettings(ray_address="ray://head:10001", workers="auto")
    assert settings.executor_config() == RayConfig(address="ray://head:10001", workers="auto")
    with pytest.raises(RequestError) as refused:
        ServiceSettings(executor="gpu")
    assert (refused.value.field, refused.value.value) == ("executor", "gpu")


@pytest.mark.parametrize(
    ("executor", "surveyed"),
    [("inprocess", (None,)), ("ray", ("ray://head:10001", "auto"))],
)
def test_service_settings_survey_the_nodes_their_executor_runs_on(
    executor: str, surveyed: tuple[object, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[object, ...]] = []

    def survey_kinds(*args: object) -> list[NodeKind]:
        asked.append(args)
        return [A100]

    monkeypatch.setattr(ray_executor, "survey_kinds", survey_kinds)
    settings = ServiceSettings(executor=executor, ray_address="ray://head:10001", workers="auto")
    assert settings.hardware.kinds() == [A100]
    assert asked == [surveyed]
