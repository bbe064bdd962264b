"""What is checked of a request before anything runs: an entry point read from its module's
source, without running it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.core.errors import RequestError
from autotune.core.model_files import resolve_entry_point, workload_python_path
from autotune.requests.checks import check_entry_point_source

MODULE = """
import numpy as np
from os import path as joined

def build():
    return 1

class Model:
    pass

if True:
    conditional = 1
try:
    from fast import tried
except ImportError:
    fallback = None
CONSTANT: int = 3
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODULE)
    (package / "lazy.py").write_text("def __getattr__(name):\n    return name\n")
    (package / "broken.py").write_text("def (:\n")
    return tmp_path


@pytest.mark.parametrize(
    "name", ["build", "Model", "conditional", "tried", "fallback", "CONSTANT", "np", "joined"]
)
def test_a_name_the_module_binds_is_found_without_running_it(root: Path, name: str) -> None:
    check_entry_point_source(f"pkg.sub.models:{name}", [str(root)], "model.entry_point")


def test_a_module_with_a_module_getattr_gets_the_benefit_of_the_doubt(root: Path) -> None:
    check_entry_point_source("pkg.sub.lazy:anything", [str(root)], "model.entry_point")


@pytest.mark.parametrize(
    ("entry_point", "rule"),
    [
        ("pkg.sub.models:missing", "has no attribute 'missing'"),
        ("pkg.sub.nowhere:build", "must be found"),
        ("pkg.sub.models.deeper:build", "must be found"),
        ("pkg.sub.broken:x", "valid Python"),
        ("pkg.sub.models", "package.module:function"),
    ],
)
def test_a_wrong_entry_point_names_the_field_and_the_rule(
    root: Path, entry_point: str, rule: str
) -> None:
    with pytest.raises(RequestError) as info:
        check_entry_point_source(entry_point, [str(root)], "data.entry_point")
    assert info.value.field == "data.entry_point" and rule in info.value.rule
    assert info.value.value == entry_point


def test_an_installed_module_is_found_on_sys_path(root: Path) -> None:
    check_entry_point_source("json:dumps", [str(root)], "metric.entry_point")


def test_the_check_reads_the_module_the_import_gets_from_the_same_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two modules of one name: the one on the earlier directory of `python_path` is the
    one imported, and the one checked."""
    for root, name in ((tmp_path / "first", "build"), (tmp_path / "second", "other")):
        (root / "twice").mkdir(parents=True)
        (root / "twice" / "__init__.py").write_text("")
        (root / "twice" / "mod.py").write_text(f"def {name}():\n    return {root.name!r}\n")
    python_path = [str(tmp_path / "first"), str(tmp_path / "second")]
    monkeypatch.setattr(sys, "path", list(sys.path))
    check_entry_point_source("twice.mod:build", python_path, "model.entry_point")
    with pytest.raises(RequestError, match="has no attribute 'other'"):
        check_entry_point_source("twice.mod:other", python_path, "model.entry_point")
    try:
        assert resolve_entry_point("twice.mod:build", python_path, "model.entry_point")() == (
            "first"
        )
    finally:
        for name in ("twice", "twice.mod"):
            sys.modules.pop(name, None)


def test_a_workload_imports_from_the_working_directory_then_its_base_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert workload_python_path(Path("models")) == [str(tmp_path), str(tmp_path / "models")]
