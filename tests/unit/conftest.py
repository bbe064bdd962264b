"""The unit tier: no test here imports torch, Ray, ONNX Runtime, OpenVINO, NNCF or MLflow.

Where a run is of this tier alone (`make test-unit`), importing one of them is an ImportError
in the test that tried, naming the rule. In a run of several tiers another tier's tests may
have loaded them already, so the rule is checked only here."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

HEAVY_PACKAGES = frozenset({"torch", "ray", "onnxruntime", "openvino", "nncf", "mlflow"})
UNIT = Path(__file__).resolve().parent


class HeavyImportRefused(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> None:
        if name.partition(".")[0] in HEAVY_PACKAGES:
            raise ImportError(
                f"{name} is not imported in the unit tier (tests/unit): a test that needs it "
                "belongs in tests/component"
            )
        return None


def only_this_tier(config: pytest.Config) -> bool:
    """Whether every path the run was given lies in this tier."""
    start = config.invocation_params.dir
    paths = [(start / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(p == UNIT or UNIT in p.parents for p in paths)


def pytest_configure(config: pytest.Config) -> None:
    if not only_this_tier(config):
        return
    loaded = sorted(n for n in sys.modules if n.partition(".")[0] in HEAVY_PACKAGES)
    if loaded:
        raise pytest.UsageError(f"the unit tier starts with heavy packages loaded: {loaded}")
    sys.meta_path.insert(0, HeavyImportRefused())
