"""An exported artifact reloads as its trial ran: the measured engine, precision, threads and
engine options, fed in batches of the measured size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.core.contract import ConfigValue
from tests.workers_support import digits_workload, skip_unless_runnable_here, spec_for
from workers import export_artifact
from workers.building.knobs.openvino import OpenVinoSession
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.runtimes import opened
from workers.building.torch_sessions import TorchCompileSession, TorchEagerSession
from workers.cache import WorkloadCache
from workers.predictor import load_predictor

STORE = WorkloadCache()

CASES: list[Any] = [
    (
        {"runtime.engine": "onnxruntime", "runtime.graph_opt": "basic", "runtime.threads": 1,
         "precision.mode": "int8_dynamic", "batch.size": 8},
        OnnxRuntimeSession,
    ),
    (
        {"runtime.engine": "openvino", "runtime.threads": 1, "batch.size": 4,
         "runtime.ov_performance_hint": "throughput"},
        OpenVinoSession,
    ),
    pytest.param(  # compiling its kernels takes seconds
        {"runtime.engine": "torch_compile", "runtime.threads": 1, "batch.size": 16},
        TorchCompileSession,
        marks=pytest.mark.slow,
    ),
    (
        {"runtime.engine": "torch_eager", "precision.mode": "bf16", "prune.method": "magnitude",
         "prune.ratio": 0.5, "batch.size": 2},
        TorchEagerSession,
    ),
]  # fmt: skip


def trial_outputs(config: dict[str, ConfigValue]) -> np.ndarray:
    """What the trial's own session gives on the evaluation inputs, batched as measured."""
    from workers.measuring.evaluate import run_all

    loaded = STORE.get(digits_workload())
    parsed = loaded.parse(config)
    with opened(loaded.session_for(parsed)) as session:
        return run_all(session, loaded.data.inputs, parsed.batch_size)


@pytest.mark.parametrize(("config", "session_type"), CASES, ids=lambda c: str(c)[:40])
def test_an_artifact_reloads_with_the_measured_engine_and_settings(
    tmp_path: Path, config: dict[str, ConfigValue], session_type: type
) -> None:
    skip_unless_runnable_here(config)
    export_artifact(spec_for(digits_workload(), config), str(tmp_path), STORE)
    with load_predictor(str(tmp_path)) as predictor:
        assert isinstance(predictor.session, session_type)
        assert predictor.batch_size == config["batch.size"]
        assert predictor.config.engine == config["runtime.engine"]
        assert predictor.config.threads == config.get("runtime.threads", predictor.config.threads)
        for key in ("runtime.graph_opt", "runtime.ov_performance_hint"):
            if key in config:
                assert predictor.config.option(key) == config[key]
        inputs = STORE.get(digits_workload()).data.inputs
        np.testing.assert_allclose(predictor.predict(inputs), trial_outputs(config), atol=1e-6)


def test_openvino_reloads_its_precision_hint(tmp_path: Path) -> None:
    config: dict[str, ConfigValue] = {
        "runtime.engine": "openvino",
        "precision.mode": "bf16",
        "runtime.threads": 1,
    }
    skip_unless_runnable_here(config)
    export_artifact(spec_for(digits_workload(), config), str(tmp_path), STORE)
    with load_predictor(str(tmp_path)) as predictor:
        assert isinstance(predictor.session, OpenVinoSession)
        assert predictor.session.applied["precision"] == "bf16"
        assert predictor.session.applied["threads"] == "1"


def test_an_onnx_file_without_its_description_runs_on_onnx_runtime_defaults(
    tmp_path: Path,
) -> None:
    artifact = export_artifact(
        spec_for(digits_workload(), {"runtime.engine": "onnxruntime"}), str(tmp_path), STORE
    )
    (tmp_path / "variant.json").unlink()
    with load_predictor(artifact.path) as predictor:
        assert isinstance(predictor.session, OnnxRuntimeSession)
        assert predictor.config.batch_size == 1
