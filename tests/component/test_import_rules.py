"""The control plane loads no heavy package when one of its modules is imported.

autotune imports torch, onnxruntime, MLflow, Ray and Optuna inside the functions that use
them, so that the CLI, the service and the coordinator's tests start quickly and a control
plane without a GPU stack still imports. No autotune module may load any of them at import
time. import-linter cannot say this (it counts an import inside a function like any other),
so each module is imported here, in a fresh interpreter, and the packages it brought into
`sys.modules` are named. The static import rules (the two planes, no cycles) are
import-linter's contracts in pyproject.toml.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

HEAVY_PACKAGES = ("torch", "onnxruntime", "mlflow", "ray", "optuna")
# Never imported as modules: Alembic runs the migrations, and __main__ runs the CLI.
NOT_IMPORTED = ("autotune.service.migrations", "autotune.__main__")

# Imports each module in turn and prints, as JSON, which of the packages each one was the
# first to load.
PROBE = """
import importlib, json, sys

modules, packages = json.loads(sys.argv[1]), json.loads(sys.argv[2])
loaded_by = {}
for module in modules:
    before = {p for p in packages if p in sys.modules}
    importlib.import_module(module)
    loaded = sorted(p for p in packages if p in sys.modules and p not in before)
    if loaded:
        loaded_by[module] = loaded
print(json.dumps(loaded_by))
"""


def autotune_modules() -> list[str]:
    modules = []
    for path in sorted((REPO / "autotune").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not any(name == skipped or name.startswith(skipped + ".") for skipped in NOT_IMPORTED):
            modules.append(name)
    return modules


def packages_loaded_by(modules: list[str], packages: tuple[str, ...]) -> dict[str, list[str]]:
    completed = subprocess.run(
        [sys.executable, "-B", "-c", PROBE, json.dumps(modules), json.dumps(packages)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    loaded_by: dict[str, list[str]] = json.loads(completed.stdout)
    return loaded_by


def test_no_autotune_module_loads_a_heavy_package_at_import_time() -> None:
    modules = autotune_modules()
    assert {"autotune", "autotune.search.coordinator", "autotune.service.api.app"} <= set(modules)

    loaded_by = packages_loaded_by(modules, HEAVY_PACKAGES)

    assert loaded_by == {}, f"imported at import time (move into the functions): {loaded_by}"


def test_the_probe_names_the_module_that_first_loads_a_package() -> None:
    loaded_by = packages_loaded_by(["json", "autotune.core.contract", "autotune"], ("pydantic",))

    assert loaded_by == {"autotune.core.contract": ["pydantic"]}
