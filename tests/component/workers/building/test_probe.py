"""The data plane's probe of the node it runs on."""

from __future__ import annotations

import importlib.util
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

import pytest

from autotune.core.artifacts import software_versions
from autotune.space.search_space import effective_space, load_space, resolve_space_path
from workers.building.probe import probe


def test_probe_works_without_gpus_and_is_stable() -> None:
    first, second = probe(), probe()
    assert first.cpu_cores >= 1 and first.memory_mb > 0
    assert first.fingerprint == second.fingerprint
    assert "cpu" in first.capabilities()
    if not first.gpus:
        assert "cuda" not in first.capabilities()


class Hidden(MetaPathFinder):
    """A package installed but not importable here (tests/ray_nodes.py hides it so on a
    node)."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name.split(".")[0] == self.package:
            raise ModuleNotFoundError(f"No module named {name!r} on this node", name=name)
        return None


class Broken(MetaPathFinder, Loader):
    """A package found whose import fails, as one whose native library is missing does."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name.split(".")[0] == self.package:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        raise OSError(f"lib{self.package}.so: cannot open shared object file")


@pytest.mark.parametrize("unimportable", [Hidden, Broken])
def test_a_node_that_cannot_import_openvino_offers_none_of_it(
    monkeypatch: pytest.MonkeyPatch, unimportable: type[Hidden | Broken]
) -> None:
    """Installed but not importable: no OpenVINO engine, none of its options in the space,
    and no OpenVINO version in what a result records (part of what it is reused by)."""
    pytest.importorskip("openvino")
    assert "openvino" in probe().engines and "openvino" in software_versions()
    for name in [m for m in sys.modules if m.split(".")[0] == "openvino"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [unimportable("openvino"), *sys.meta_path])

    profile = probe()
    assert "openvino" not in profile.engines
    assert "openvino" not in software_versions()
    path = resolve_space_path("default.yaml")
    space = effective_space(load_space(path), profile, str(path))
    assert "openvino" not in space.choices()["runtime.engine"]
    assert not [d.name for d in space.dimensions if d.name.startswith("runtime.ov_")]
