"""A source tree run without installing (PYTHONPATH, as the GPU check runs): autotune's own
components come from its pyproject.toml, the installed metadata of another tree ignored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from autotune.core.plugins import PACKAGE_DIR

SOURCE_ROOT = PACKAGE_DIR.parent
REGISTRIES = """
import json
from autotune.core import plugins
from autotune.core.knobs import ENGINES, PRECISIONS
from autotune.execution.registry import executor_types
from autotune.strategies import strategy_names
from workers.building.knobs import unimplemented
from workers.measuring.energy import METERS
print(json.dumps({
    "installed": plugins.installed_autotune() is not None,
    "package": str(plugins.PACKAGE_DIR),
    "engines": list(ENGINES),
    "precisions": list(PRECISIONS),
    "meters": list(METERS),
    "strategies": strategy_names(),
    "executors": executor_types(),
    "unimplemented": unimplemented(),
}))
"""


def copy_of_source_tree(to: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("autotune", "workers"):
        shutil.copytree(SOURCE_ROOT / package, to / package, ignore=ignore)
    shutil.copy(SOURCE_ROOT / "pyproject.toml", to / "pyproject.toml")
    return to


def registries_of(tree: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run(
        [sys.executable, "-s", "-c", REGISTRIES],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(run.stdout.splitlines()[-1])


def test_a_copy_on_pythonpath_registers_its_own_components_from_its_pyproject(
    tmp_path: Path,
) -> None:
    found = registries_of(copy_of_source_tree(tmp_path))
    assert found["installed"] is False
    assert found["package"] == str((tmp_path / "autotune").resolve())
    assert {"torch_eager", "onnxruntime", "openvino"} <= set(found["engines"])
    assert {"fp32", "int8_dynamic"} <= set(found["precisions"])
    assert found["meters"] == ["nvml", "rapl"]
    assert found["executors"] == ["ray", "in_process", "replay"]
    assert "autotune" in found["strategies"]
    assert found["unimplemented"] == []


def test_a_table_missing_from_the_copys_pyproject_leaves_its_registry_empty(
    tmp_path: Path,
) -> None:
    tree = copy_of_source_tree(tmp_path)
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    meters_table = (
        '[project.entry-points."autotune.meters"]\ncounters = "workers.measuring.counters"\n'
    )
    assert meters_table in text
    pyproject.write_text(text.replace(meters_table, ""))
    assert registries_of(tree)["meters"] == []
