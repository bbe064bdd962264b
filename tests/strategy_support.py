"""What the strategy's tests share: a request on a recorded table, the small space's baseline
and its ONNX Runtime variant, and the search benchmark (experiments/search_benchmark.py) loaded
as a module."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from autotune.requests.request import TuningRequest, parse_request
from tests.conftest import REPO
from tests.replay_tables import BASELINE

BENCHMARK = REPO / "experiments" / "search_benchmark.py"

SMALL_BASELINE = {**BASELINE, "precision.mode": "fp32"}
ONNX = {**SMALL_BASELINE, "runtime.engine": "onnxruntime", "runtime.graph_opt": "all"}


def request(**fields: Any) -> TuningRequest:
    return parse_request({"name": "r", **fields}, replay=True)


def load_benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("search_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["search_benchmark"] = module
    spec.loader.exec_module(module)
    return module
