"""A knob whose package is not installed on the node is not dropped silently: the probe says
the module is missing, and `autotune hardware` and `autotune space` say what to install."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from autotune.cli import app, hardware
from autotune.core.contract import HardwareProfile, NodeKind
from autotune.core.knobs import ENGINES, Engine, Package, register
from autotune.execution import ray_executor
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR, effective_space, load_space
from workers.building.probe import missing_modules, probe

ABSENT = "autotune_example_absent_module"
HINT = "install autotune[cpu] to search runtime.engine=example_absent"
runner = CliRunner()


class AbsentEngine(Engine):
    name = "example_absent"
    model_format = "onnx"
    precisions = frozenset({"fp32"})
    package = Package(ABSENT, ("cpu",))
    served_as = "files"


@pytest.fixture(autouse=True)
def wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "out", Console(width=300))


@pytest.fixture
def absent_engine() -> Iterator[None]:
    register(AbsentEngine)
    try:
        yield
    finally:
        del ENGINES[AbsentEngine.name]


def test_the_probe_names_the_modules_the_knobs_need_that_are_missing(absent_engine: None) -> None:
    assert ABSENT in missing_modules()
    assert ABSENT in probe().missing_modules


HIDDEN = "autotune_example_hidden_module"


class HidingHook:
    """An import hook that hides a module by raising ImportError, as sitecustomize hooks do."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == HIDDEN:
            raise ImportError(f"{HIDDEN} is hidden from this process")


def test_a_module_an_import_hook_hides_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "meta_path", [HidingHook(), *sys.meta_path])
    monkeypatch.setattr(AbsentEngine, "package", Package(HIDDEN, ("cpu",)))
    register(AbsentEngine)
    try:
        assert HIDDEN in missing_modules()
    finally:
        del ENGINES[AbsentEngine.name]


def test_autotune_hardware_says_what_to_install(
    absent_engine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = NodeKind.one_node(probe(), "local")
    monkeypatch.setattr(ray_executor, "survey_kinds", lambda *_: [kind])
    shown = runner.invoke(app, ["hardware"])
    assert shown.exit_code == 0, shown.output
    assert f"missing:      {HINT} ({ABSENT} is not installed)" in shown.output


def test_autotune_space_says_what_to_install(absent_engine: None, tmp_path: Path) -> None:
    """From the profile as the node sends it (JSON): the engine is excluded, with the hint."""
    profile = tmp_path / "node.json"
    profile.write_text(probe().model_dump_json())
    space = tmp_path / "engines.yaml"
    engines = {"name": "runtime.engine", "values": ["onnxruntime", AbsentEngine.name]}
    space.write_text(yaml.safe_dump({"name": "engines", "dimensions": [engines]}))
    shown = runner.invoke(app, ["space", "--hardware", str(profile), "--space", str(space)])
    assert shown.exit_code == 0, shown.output
    assert f"example_absent: {ABSENT} is not installed; {HINT}" in shown.output


def test_a_saved_profile_of_a_node_without_openvino_says_what_to_install() -> None:
    """The profile alone decides (the control plane imports nothing of the node's); an older
    profile, which does not list missing modules, keeps its plain reason."""
    saved = load_profile(SPACES_DIR / "profiles" / "cpu-only.json")
    lacking = saved.model_copy(update={"missing_modules": ["openvino"]})
    path = SPACES_DIR / "default.yaml"

    def openvino_reason(profile: HardwareProfile) -> str:
        space = effective_space(load_space(path), profile, str(path))
        return next(e.reason for e in space.excluded if e.value == "openvino")

    assert openvino_reason(saved) == "runtime.engine=openvino needs openvino"
    assert openvino_reason(lacking) == (
        "runtime.engine=openvino: openvino is not installed; install autotune[openvino] to "
        "search runtime.engine=openvino"
    )
    assert lacking.fingerprint == saved.fingerprint
