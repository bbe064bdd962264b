from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.core.contract import ConfigValue
from autotune.core.errors import Unsupported
from autotune.core.knobs import Target
from autotune.core.knobs.config import parse_config
from workers.building.knobs import engine_of
from workers.building.knobs.openvino import OpenVinoSession
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.transforms import torch_to_onnx
from workers.building.variants import OnnxVariant
from workers.loading.feeds import pack

CPUS = len(os.sched_getaffinity(0))
ENGINE = engine_of("openvino")
CAPABILITIES = frozenset({"openvino", "cpu.bf16", "cpu.avx2", "ort.cpu"})


def _cpu_has_bf16() -> bool:
    flags = re.findall(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    return any({"avx512_bf16", "amx_bf16"} & set(line.split()) for line in flags)


needs_bf16 = pytest.mark.skipif(
    not _cpu_has_bf16(), reason="cpu.bf16 is absent (no avx512_bf16 or amx_bf16 flag)"
)


@pytest.fixture(scope="module")
def inputs() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def mlp_onnx(inputs: np.ndarray) -> bytes:
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).eval()
    return torch_to_onnx(module, inputs[:2])


def test_fp32_matches_onnxruntime(mlp_onnx: bytes, inputs: np.ndarray) -> None:
    session = OpenVinoSession(mlp_onnx, 1, "fp32", "latency", 1)
    expected = OnnxRuntimeSession(mlp_onnx, 1).run(inputs)
    outputs = session.run(inputs)
    assert outputs.dtype == np.float32 and outputs.shape == (16, 10)
    np.testing.assert_allclose(outputs, expected, atol=1e-4, rtol=1e-4)
    assert session.applied["precision"] == "f32"
    assert session.fixed_batch is None


@needs_bf16
def test_bf16_is_applied_and_close(mlp_onnx: bytes, inputs: np.ndarray) -> None:
    session = OpenVinoSession(mlp_onnx, 1, "bf16", "latency", 1)
    expected = OnnxRuntimeSession(mlp_onnx, 1).run(inputs)
    outputs = session.run(inputs)
    assert session.applied["precision"] == "bf16"
    assert not np.array_equal(outputs, expected), "bf16 must actually change the arithmetic"
    np.testing.assert_allclose(outputs, expected, atol=0.05, rtol=0.05)


@pytest.mark.parametrize(
    ("threads", "streams", "hint"), [(1, 1, "latency"), (2, 1, "latency"), (2, 2, "throughput")]
)
def test_settings_read_back_as_asked(
    mlp_onnx: bytes, threads: int, streams: int, hint: str
) -> None:
    if threads > CPUS:
        pytest.skip(f"needs {threads} CPUs; {CPUS} are available")
    session = OpenVinoSession(mlp_onnx, threads, "fp32", hint, streams)
    assert session.applied == {
        "threads": str(threads),
        "precision": "f32",
        "hint": hint,
        "streams": str(streams),
    }


def test_a_setting_the_plugin_changes_is_refused(mlp_onnx: bytes) -> None:
    # The CPU plugin gives each stream a thread: two streams on one thread compile as one.
    with pytest.raises(Unsupported, match="runtime.ov_streams"):
        OpenVinoSession(mlp_onnx, 1, "fp32", "throughput", 2)


def test_threads_calling_at_once_get_the_same_outputs(mlp_onnx: bytes, inputs: np.ndarray) -> None:
    session = OpenVinoSession(mlp_onnx, 1, "fp32", "latency", 1)
    expected = session.run(inputs)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(session.run, [inputs] * 8))
    for outputs in results:
        np.testing.assert_array_equal(outputs, expected)


def _onnx_model(input_shapes: list[list[int]]) -> bytes:
    import onnx
    from onnx import TensorProto, helper

    names = [f"x{i}" for i in range(len(input_shapes))]
    node = (
        helper.make_node("Add", names, ["y"])
        if len(names) == 2
        else helper.make_node("Relu", names, ["y"])
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
            for n, s in zip(names, input_shapes, strict=True)
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, input_shapes[0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_a_two_input_model_takes_its_inputs_by_name() -> None:
    session = OpenVinoSession(_onnx_model([[3, 4], [3, 4]]), 1, "fp32", "latency", 1)
    with pytest.raises(Unsupported, match="takes 2 inputs"):
        session.run(np.zeros((3, 4), np.float32))
    x0, x1 = np.ones((3, 4)), np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(session.run(pack({"x1": x1, "x0": x0})), x0 + x1)


def test_a_static_batch_is_reported_and_inputs_are_cast() -> None:
    session = OpenVinoSession(_onnx_model([[3, 4]]), 1, "fp32", "latency", 1)
    assert session.fixed_batch == 3
    batch = np.arange(-6, 6, dtype=np.float64).reshape(3, 4)
    outputs = session.run(batch)
    assert outputs.dtype == np.float32
    np.testing.assert_array_equal(outputs, np.maximum(batch, 0).astype(np.float32))


def test_the_engine_builds_a_session_from_the_configuration(
    mlp_onnx: bytes, inputs: np.ndarray
) -> None:
    config = parse_config(
        {
            "runtime.engine": "openvino",
            "runtime.threads": 1,
            "runtime.ov_performance_hint": "throughput",
            "runtime.ov_streams": 1,
        },
        "torch",
    )
    assert ENGINE.supports(config, Target(CAPABILITIES, "torch")) is None
    ENGINE.check_machine(config)
    session = ENGINE.session(OnnxVariant(mlp_onnx), config)
    assert isinstance(session, OpenVinoSession)
    assert session.applied["hint"] == "throughput" and session.applied["threads"] == "1"
    np.testing.assert_allclose(
        session.run(inputs), OnnxRuntimeSession(mlp_onnx, 1).run(inputs), atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"precision.mode": "int8_dynamic"}, "precision.mode"),
        ({"runtime.device": "cuda"}, "runtime.device"),
        ({"runtime.provider": "cuda"}, "runtime.provider"),
        ({"runtime.compile_mode": "max-autotune"}, "runtime.compile_mode"),
        ({"runtime.threads": 1, "runtime.ov_streams": 2}, "runtime.ov_streams"),
        ({"attention.sdpa_backend": "math"}, "attention.sdpa_backend"),
    ],
)
def test_supports_refuses_with_the_key_named(settings: dict[str, ConfigValue], key: str) -> None:
    config = parse_config({"runtime.engine": "openvino", **settings}, "torch")
    reason = ENGINE.supports(config, Target(CAPABILITIES | {"cuda"}, "torch"))
    assert reason is not None and key in reason


def test_supports_needs_the_openvino_capability() -> None:
    config = parse_config({"runtime.engine": "openvino"}, "torch")
    reason = ENGINE.supports(config, Target(frozenset({"ort.cpu"}), "torch"))
    assert reason is not None and "openvino" in reason


def test_options_are_parsed_and_checked() -> None:
    with pytest.raises(Unsupported, match="runtime.ov_streams"):
        parse_config({"runtime.engine": "openvino", "runtime.ov_streams": 0}, "torch")
    with pytest.raises(Unsupported, match="runtime.ov_performance_hint"):
        parse_config({"runtime.engine": "openvino", "runtime.ov_performance_hint": "fast"}, "torch")
    assert all(re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", o.key) for o in ENGINE.options)


def test_probe_finds_the_cpu_plugin() -> None:
    assert ENGINE.probe() == {"openvino"}
