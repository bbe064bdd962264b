"""Precision: which engine x device x precision combinations build, static int8 and float16 on
ONNX, and the CUDA paths (fp16/bf16 placement, fp8 with torchao) where a GPU is present."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto

from autotune.core.contract import ConfigValue, DataRef, MetricRef, ModelRef
from autotune.core.errors import Unsupported
from autotune.core.knobs import Target, supports
from autotune.core.knobs.config import TrialConfig, parse_config
from tests.workers_support import digits_workload, export_digits_onnx, spec_for
from workers import evaluate_artifact, export_artifact, run_trial
from workers.building import quantization, transforms
from workers.building.calibration import (
    CALIBRATION_SAMPLES,
    calibration_reader,
    calibration_subset,
)
from workers.building.knobs import precision_of
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.quantization import convert_onnx_fp16, quantize_onnx_int8_static
from workers.building.runtimes import machine_target
from workers.building.variants import BuildContext, OnnxVariant, TorchVariant
from workers.cache import WorkloadCache
from workers.loading.feeds import pack

STORE = WorkloadCache(capacity=4)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def top1(model_bytes: bytes, digits: tuple[np.ndarray, np.ndarray]) -> float:
    predictions = OnnxRuntimeSession(model_bytes, threads=1).run(digits[0]).argmax(axis=1)
    return float(np.mean(predictions == digits[1]))


def ops(model_bytes: bytes) -> set[str]:
    return {node.op_type for node in onnx.load_model_from_string(model_bytes).graph.node}


# --- which combinations build -------------------------------------------------------------------


CPU_CAPS = frozenset({"cpu", "cpu.bf16", "cpu.avx2", "ort.cpu", "torch.compile"})
HOPPER_CAPS = CPU_CAPS | {
    "cuda",
    "cuda.bf16",
    "cuda.fp8",
    "cuda.sparse24",
    "ort.cuda",
    "ort.tensorrt",
}
AMPERE_CAPS = HOPPER_CAPS - {"cuda.fp8"}
TURING_CAPS = AMPERE_CAPS - {"cuda.bf16", "cuda.sparse24"}


def reason(config: dict[str, ConfigValue], caps: frozenset[str] = CPU_CAPS) -> str | None:
    """Why the knobs refuse `config` on a machine with `caps`, decided before any build."""
    return supports(parse_config(config, "torch"), Target(caps, "torch"))


ORT = {"runtime.engine": "onnxruntime"}
CUDA = {"runtime.device": "cuda"}


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({"precision.mode": "int8_static"}, "int8_static does not run on runtime.engine=torch"),
        ({"precision.mode": "fp16"}, "fp16 needs CUDA"),
        ({"precision.mode": "fp8"}, "fp8 needs CUDA with compute capability >= 8.9"),
        ({"prune.method": "semi_structured_2_4"}, "accelerated only on CUDA"),
        ({**ORT, "precision.mode": "fp16"}, "not supported by onnxruntime's CPUExecutionProvider"),
        ({**ORT, "precision.mode": "bf16", "runtime.provider": "cuda"}, "bf16 does not run on"),
        ({**ORT, "precision.mode": "fp8", "runtime.provider": "cuda"}, "fp8 does not run on"),
        ({**ORT, "prune.method": "semi_structured_2_4"}, "torch engines on CUDA"),
    ],
)
def test_combinations_that_cannot_build(config: dict[str, ConfigValue], reason_part: str) -> None:
    assert reason_part in (
        reason(config, HOPPER_CAPS if "runtime.provider" in config else CPU_CAPS) or ""
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_cuda_without_a_device_is_unsupported() -> None:
    assert reason(CUDA, machine_target().capabilities) == (
        "runtime.device=cuda but no CUDA device is visible"
    )
    result = run_trial(spec_for(digits_workload(), CUDA), STORE)
    assert result.status == "unsupported"
    assert "no CUDA device is visible" in (result.reason or "")


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({**CUDA, "precision.mode": "int8_dynamic"}, "CPU kernels only"),
        ({**CUDA, "prune.method": "semi_structured_2_4"}, "fp16 or bf16"),
    ],
)
def test_combinations_that_cannot_build_on_a_gpu(
    config: dict[str, ConfigValue], reason_part: str
) -> None:
    assert reason_part in (reason(config, HOPPER_CAPS) or "")


@pytest.mark.skipif(importlib.util.find_spec("torchao") is not None, reason="torchao is here")
def test_fp8_without_torchao_names_the_package(digits_module: torch.nn.Module) -> None:
    assert reason({**CUDA, "precision.mode": "fp8"}, HOPPER_CAPS) is None  # a package: at build
    config = parse_config({**CUDA, "precision.mode": "fp8"}, "torch")
    with pytest.raises(Unsupported, match="needs the package 'torchao'"):
        precision_of("fp8").build(TorchVariant(digits_module), config, BuildContext(np.empty(0)))


def test_capability_limits() -> None:
    fp8 = {**CUDA, "precision.mode": "fp8"}
    assert ">= 8.9" in (reason(fp8, AMPERE_CAPS) or "")
    sparse = {**CUDA, "prune.method": "semi_structured_2_4", "precision.mode": "fp16"}
    assert reason(sparse, AMPERE_CAPS) is None
    assert "accelerated only on CUDA" in (reason(sparse, TURING_CAPS) or "")
    assert "bf16 on cuda needs cuda.bf16" in (
        reason({**CUDA, "precision.mode": "bf16"}, TURING_CAPS) or ""
    )


@pytest.mark.parametrize(
    "config",
    [
        {**CUDA, "precision.mode": "fp16"},
        {**CUDA, "precision.mode": "bf16", "runtime.engine": "torch_compile"},
        {**CUDA, "prune.method": "semi_structured_2_4", "precision.mode": "bf16"},
        {**ORT, "precision.mode": "fp16", "runtime.provider": "tensorrt"},
    ],
)
def test_combinations_that_build_on_a_gpu(config: dict[str, ConfigValue]) -> None:
    assert reason(config, HOPPER_CAPS) is None


@pytest.mark.parametrize(
    "config",
    [
        {"precision.mode": "bf16", "prune.method": "structured", "prune.ratio": 0.5},
        {"precision.mode": "int8_dynamic", "runtime.engine": "torch_compile"},
        {**ORT, "precision.mode": "int8_static", "prune.method": "magnitude", "prune.ratio": 0.3},
    ],
)
def test_combinations_that_build_on_the_cpu(config: dict[str, ConfigValue]) -> None:
    assert reason(config) is None


def test_fp32_on_the_cpu_is_the_variant_itself(digits_module: torch.nn.Module) -> None:
    variant = TorchVariant(digits_module)
    assert built(variant, parse_config({}, "torch")) is variant


def built(variant: TorchVariant, config: TrialConfig) -> TorchVariant:
    """The variant its precision's implementation builds."""
    result = precision_of(config.precision).build(variant, config, BuildContext(np.empty(0)))
    assert isinstance(result, TorchVariant)
    return result


# --- ONNX static int8 ---------------------------------------------------------------------------


def test_calibration_samples_are_bounded_evenly_spaced_and_fixed() -> None:
    inputs = np.arange(1000)
    chosen = calibration_subset(inputs)
    assert len(chosen) == CALIBRATION_SAMPLES and len(np.unique(chosen)) == CALIBRATION_SAMPLES
    assert chosen[0] == 0 and chosen[-1] >= 995 and np.all(np.diff(chosen) <= 4)
    np.testing.assert_array_equal(calibration_subset(inputs), chosen)
    np.testing.assert_array_equal(calibration_subset(inputs[:10]), inputs[:10])


def test_static_int8_is_qdq_and_as_accurate_as_fp32(
    digits_onnx: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    original = digits_onnx.read_bytes()
    quantized = quantize_onnx_int8_static(original, digits[0])
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"} <= ops(quantized)
    weights = onnx.load_model_from_string(quantized).graph.initializer
    assert any(t.data_type == TensorProto.INT8 and len(t.dims) == 4 for t in weights), "conv"
    # Measured: fp32 98.2 %, static int8 98.4 %.
    assert abs(top1(quantized, digits) - top1(original, digits)) <= 0.01


def test_calibration_batches_follow_a_fixed_batch_axis(
    tmp_path: Path, digits_module: torch.nn.Module
) -> None:
    path = export_digits_onnx(digits_module, tmp_path / "fixed.onnx", batch=4)
    model = onnx.load_model(str(path))
    reader = calibration_reader(model, np.zeros((10, 1, 8, 8), np.float64))
    batches = [batch[model.graph.input[0].name] for batch in iter(reader.get_next, None)]
    assert [(b.shape, b.dtype) for b in batches] == [((4, 1, 8, 8), np.float32)] * 2
    with pytest.raises(Unsupported, match="do not fill one batch of 4"):
        calibration_reader(onnx.load_model(str(path)), np.zeros((3, 1, 8, 8), np.float32))


def test_fewer_samples_than_a_calibration_batch_calibrate_a_dynamic_batch_model(
    digits_onnx: Path,
) -> None:
    reader = calibration_reader(onnx.load_model(str(digits_onnx)), np.zeros((8, 1, 8, 8)))
    assert [b["input"].shape for b in iter(reader.get_next, None)] == [(8, 1, 8, 8)]


@pytest.mark.parametrize(("count", "sizes"), [(56, [28, 28]), (250, [31] * 8), (256, [32] * 8)])
def test_calibration_batches_of_a_dynamic_batch_model_are_one_size(
    digits_onnx: Path, count: int, sizes: list[int]
) -> None:
    """The histogram calibrators (entropy, percentile) stack the batches' outputs: a last,
    smaller batch would fail them."""
    reader = calibration_reader(onnx.load_model(str(digits_onnx)), np.zeros((count, 1, 8, 8)))
    assert [b["input"].shape[0] for b in iter(reader.get_next, None)] == sizes


def test_static_int8_that_does_not_load_is_unsupported(
    monkeypatch: pytest.MonkeyPatch, digits_onnx: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    monkeypatch.setattr(quantization, "cpu_load_problem", lambda model_bytes: "broken")
    with pytest.raises(Unsupported, match="int8_static: the quantized model does not load"):
        quantize_onnx_int8_static(digits_onnx.read_bytes(), digits[0])


def test_static_int8_without_calibration_inputs_is_unsupported(digits_onnx: Path) -> None:
    config = parse_config({"precision.mode": "int8_static"}, "onnx")
    from workers.building.variants import OnnxVariant

    with pytest.raises(Unsupported, match="needs calibration inputs"):
        transforms.precision(
            OnnxVariant(digits_onnx.read_bytes()), config, BuildContext(np.empty(0))
        )


STATIC: dict[str, ConfigValue] = {**ORT, "precision.mode": "int8_static", "batch.size": 8}


def test_a_static_int8_trial_and_its_artifact(tmp_path: Path) -> None:
    fp32 = run_trial(spec_for(digits_workload(), ORT), STORE)
    trial = run_trial(spec_for(digits_workload(), STATIC), STORE)
    assert trial.status == "ok" and trial.metrics and fp32.metrics, trial.reason
    assert abs(trial.metrics.accuracy - fp32.metrics.accuracy) <= 0.01
    artifact = export_artifact(spec_for(digits_workload(), STATIC), str(tmp_path / "a"), STORE)
    assert artifact.format == "onnx" and "QuantizeLinear" in ops(Path(artifact.path).read_bytes())
    assert evaluate_artifact(artifact.path, digits_workload(), WorkloadCache()) == (
        trial.metrics.accuracy
    )
    again = export_artifact(
        spec_for(digits_workload(), STATIC), str(tmp_path / "b"), WorkloadCache()
    )
    assert again.sha256 == artifact.sha256, "calibration is deterministic"


def test_static_int8_on_an_onnx_model(digits_onnx: Path) -> None:
    workload = digits_workload(model=ModelRef(onnx=str(digits_onnx)))
    result = run_trial(spec_for(workload, STATIC), STORE)
    assert result.status == "ok" and result.metrics and result.metrics.accuracy >= 0.95


# --- ONNX float16 -------------------------------------------------------------------------------


def test_fp16_conversion_keeps_float32_inputs_and_outputs(
    digits_onnx: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    original = digits_onnx.read_bytes()
    converted = onnx.load_model_from_string(convert_onnx_fp16(original))
    weights = [t for t in converted.graph.initializer if "weight" in t.name]
    assert weights and all(t.data_type == TensorProto.FLOAT16 for t in weights)
    for value in [*converted.graph.input, *converted.graph.output]:
        assert value.type.tensor_type.elem_type == TensorProto.FLOAT
    # onnxruntime's CPU provider can run it (slowly); the trial itself needs a GPU provider.
    outputs = OnnxRuntimeSession(converted.SerializeToString(), threads=1).run(digits[0][:64])
    expected = OnnxRuntimeSession(original, threads=1).run(digits[0][:64])
    np.testing.assert_allclose(outputs, expected, atol=0.05)


# --- CUDA ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("mode", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precisions_on_cuda(
    digits_module: torch.nn.Module, mode: str, dtype: torch.dtype
) -> None:
    config = parse_config({**CUDA, "precision.mode": mode}, "torch")
    variant = built(TorchVariant(digits_module), config)
    assert variant.input_dtype == dtype
    assert all(p.is_cuda and p.dtype == dtype for p in variant.module.parameters())
    assert all(not p.is_cuda for p in digits_module.parameters()), "the original is untouched"


@pytest.mark.gpu
@needs_cuda
def test_fp32_on_cuda_moves_the_weights(digits_module: torch.nn.Module) -> None:
    variant = built(TorchVariant(digits_module), parse_config(CUDA, "torch"))
    assert all(p.is_cuda and p.dtype == torch.float32 for p in variant.module.parameters())


@pytest.mark.gpu
@needs_cuda
def test_fp8_with_torchao(digits_module: torch.nn.Module) -> None:
    pytest.importorskip("torchao")
    if torch.cuda.get_device_capability() < quantization.FP8_MIN_CAPABILITY:
        pytest.skip("fp8 needs compute capability >= 8.9")
    config = parse_config({**CUDA, "precision.mode": "fp8"}, "torch")
    variant = transforms.build_variant(
        TorchVariant(digits_module), config, BuildContext(np.empty(0))
    )
    assert isinstance(variant, TorchVariant) and variant.input_dtype == torch.bfloat16
    fc1 = variant.module.get_submodule("classifier.1")
    assert "float8" in str(fc1.weight.dtype) or "Float8" in type(fc1.weight).__name__
    inputs = torch.randn(32, 1, 8, 8, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        assert variant.module(inputs).shape == (32, 10)


def test_static_int8_of_an_opset_12_export_is_per_channel() -> None:
    """Paddle and older exporters write opset 11 or 12, whose DequantizeLinear has no axis:
    the model is converted first, and its weights keep their per-channel scales."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "opset12",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])],
        [weights],
    )
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    old.ir_version = 7
    inputs = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
    quantized = onnx.load_model_from_string(
        quantize_onnx_int8_static(old.SerializeToString(), inputs)
    )
    scales = [
        numpy_helper.to_array(t) for t in quantized.graph.initializer if t.name.endswith("_scale")
    ]
    assert any(scale.size == 4 for scale in scales)  # one per output channel
    session = OnnxRuntimeSession(quantized.SerializeToString(), threads=1)
    assert session.run(inputs[:4]).shape == (4, 4, 8, 8)


# --- ONNX int4 weight-only ----------------------------------------------------------------------


def matmul_mlp(path: Path) -> Path:
    """Y = relu(X @ W1) @ W2 over 64 features: MatMuls with constant weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.2, (64, 64)).astype(np.float32), "W1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.2, (64, 10)).astype(np.float32), "W2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["H"]),
            helper.make_node("Relu", ["H"], ["R"]),
            helper.make_node("MatMul", ["R", "W2"], ["Y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 10])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


def test_int4_weight_only_runs_a_real_trial_on_matmul_weights(tmp_path: Path) -> None:
    """The worked example of a new precision: one declaration, one implementation. Its MatMul
    weights become MatMulNBits, the trial runs on ONNX Runtime and its fidelity to the fp32
    model is high but not exact."""
    model = matmul_mlp(tmp_path / "mlp.onnx")
    np.savez(tmp_path / "d.npz", X=np.random.default_rng(1).normal(size=(128, 64)))
    workload = digits_workload(
        ModelRef(onnx=str(model)), DataRef(npz=str(tmp_path / "d.npz")), MetricRef(kind="fidelity")
    )
    config: dict[str, ConfigValue] = {
        "runtime.engine": "onnxruntime",
        "precision.mode": "int4_weight_only",
        "batch.size": 8,
    }

    result = run_trial(spec_for(workload, config), WorkloadCache())
    variant = WorkloadCache().get(workload).variant_for(parse_config(config, "onnx"))

    assert result.status == "ok", result.reason
    assert result.metrics is not None and 0.98 < result.metrics.accuracy < 1.0
    assert isinstance(variant, OnnxVariant)
    ops = [n.op_type for n in onnx.load_model_from_string(variant.model_bytes).graph.node]
    assert ops.count("MatMulNBits") == 2 and "MatMul" not in ops


def test_int4_weight_only_on_a_model_without_matmul_weights_is_unsupported(
    digits_onnx: Path, digits_npz: Path
) -> None:
    workload = digits_workload(ModelRef(onnx=str(digits_onnx)), DataRef(npz=str(digits_npz)))
    config: dict[str, ConfigValue] = {
        "runtime.engine": "onnxruntime",
        "precision.mode": "int4_weight_only",
    }
    result = run_trial(spec_for(workload, config), STORE)
    assert result.status == "unsupported"
    assert "no MatMul with a constant weight" in (result.reason or "")


def test_int4_weight_only_runs_on_onnx_runtime_only() -> None:
    assert reason({"precision.mode": "int4_weight_only"}) == (
        "precision.mode=int4_weight_only does not run on runtime.engine=torch_eager "
        "(it runs bf16, fp16, fp32, fp8, int8_dynamic)"
    )


def test_a_model_the_quantizer_leaves_in_float_is_not_an_int8_variant() -> None:
    """ONNX Runtime's quantizer does not enter If branches: a model whose weights are all
    there comes back unchanged, and measuring it as int8 would report a float model."""
    from tests.onnx_models import constant_weights_in_if_branches
    from workers.building.quantization import quantize_onnx_int8, quantize_onnx_int8_static
    from workers.loading.onnx_normalize import normalize_onnx

    model = normalize_onnx(constant_weights_in_if_branches()).SerializeToString()
    with pytest.raises(
        Unsupported, match="int8_dynamic: the quantizer left every node in float; its 2 If"
    ):
        quantize_onnx_int8(model)
    samples = pack({"x": np.ones((8, 4), np.float32), "flag": np.ones(8, bool)})
    with pytest.raises(Unsupported, match="int8_static: the quantizer left every node in float"):
        quantize_onnx_int8_static(model, samples)


@pytest.mark.parametrize(
    ("raised", "expected"),
    [(ValueError("No data is collected.\nmore"), Unsupported), (MemoryError(), MemoryError)],
)
def test_the_static_quantizer_failing_on_the_model_is_unsupported_in_one_line(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, expected: type[Exception]
) -> None:
    """ONNX Runtime's calibrator gives up on some models (a text-orientation classifier:
    'No data is collected'): that variant cannot be built for the model, said in one line;
    running out of memory is the machine's state and stays what it is."""
    import onnxruntime.quantization

    from tests.onnx_models import constant_weights_in_if_branches
    from workers.building.quantization import quantize_onnx_int8_static

    def failing(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(onnxruntime.quantization, "quantize_static", failing)
    model = constant_weights_in_if_branches().SerializeToString()
    samples = pack({"x": np.ones((8, 4), np.float32), "flag": np.ones(8, bool)})
    with pytest.raises(expected) as caught:
        quantize_onnx_int8_static(model, samples)
    if expected is Unsupported:
        assert str(caught.value) == (
            "precision.mode=int8_static: ONNX Runtime's static quantizer fails on this model "
            "(ValueError: No data is collected.)"
        )
