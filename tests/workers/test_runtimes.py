from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.errors import Unsupported
from workers.config import parse_config
from workers.runtimes import RUNTIMES, OnnxRuntimeSession, build_session, register_runtime
from workers.variants import OnnxVariant, TorchVariant


def test_torch_eager_matches_the_module(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    session = build_session(TorchVariant(digits_module), parse_config({}, "torch"))
    with torch.inference_mode():
        expected = digits_module(torch.from_numpy(digits[0][:3])).numpy()
    np.testing.assert_array_equal(session.run(digits[0][:3]), expected)


def test_torch_eager_bf16_returns_float32(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    half = copy.deepcopy(digits_module).to(torch.bfloat16)
    session = build_session(TorchVariant(half, torch.bfloat16), parse_config({}, "torch"))
    outputs = session.run(digits[0][:20])
    assert outputs.dtype == np.float32 and outputs.shape == (20, 10)
    with torch.inference_mode():
        full = digits_module(torch.from_numpy(digits[0][:20])).numpy()
    assert not np.array_equal(outputs, full), "bf16 must actually change the arithmetic"
    np.testing.assert_allclose(outputs, full, atol=0.2)


def test_each_torch_session_runs_with_its_own_thread_count(
    digits_module: torch.nn.Module,
) -> None:
    batch = np.zeros((1, 1, 8, 8), np.float32)
    before = torch.get_num_threads()
    single = build_session(
        TorchVariant(digits_module), parse_config({"runtime.threads": 1}, "torch")
    )
    double = build_session(
        TorchVariant(digits_module), parse_config({"runtime.threads": 2}, "torch")
    )
    try:
        single.run(batch)
        assert torch.get_num_threads() == 1
        double.run(batch)
        assert torch.get_num_threads() == 2
        single.run(batch)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_onnxruntime_matches_torch(
    digits_onnx: Path, digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    config = parse_config({"runtime.threads": 1}, "onnx")
    session = build_session(OnnxVariant(digits_onnx.read_bytes()), config)
    with torch.inference_mode():
        expected = digits_module(torch.from_numpy(digits[0][:9])).numpy()
    np.testing.assert_allclose(session.run(digits[0][:9]), expected, atol=1e-5)


def test_onnxruntime_casts_float64_inputs(digits_onnx: Path) -> None:
    session = OnnxRuntimeSession(digits_onnx.read_bytes(), threads=1)
    assert session.run(np.zeros((2, 1, 8, 8), np.float64)).shape == (2, 10)


def test_onnxruntime_reports_a_fixed_batch(tmp_path: Path, digits_module: torch.nn.Module) -> None:
    from tests.workers.conftest import export_digits_onnx

    path = export_digits_onnx(digits_module, tmp_path / "fixed.onnx", batch=4)
    assert OnnxRuntimeSession(path.read_bytes(), threads=1).fixed_batch == 4


def test_engine_and_variant_kind_must_match(
    digits_onnx: Path, digits_module: torch.nn.Module
) -> None:
    with pytest.raises(Unsupported):
        RUNTIMES["torch_eager"](OnnxVariant(digits_onnx.read_bytes()), parse_config({}, "torch"))
    with pytest.raises(Unsupported):
        RUNTIMES["onnxruntime"](TorchVariant(digits_module), parse_config({}, "torch"))


def test_registering_a_runtime_twice_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_runtime("onnxruntime")(RUNTIMES["onnxruntime"])
