from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.core.contract import ConfigValue
from autotune.core.errors import Unsupported
from autotune.core.knobs import ENGINES, register
from autotune.core.knobs.config import parse_config
from autotune.core.knobs.engines import ORT_GRAPH_LEVELS
from workers.building.knobs import engine_of
from workers.building.ort_session import OnnxRuntimeSession
from workers.building.runtimes import build_session, check_runtime
from workers.building.torch_io import module_on
from workers.building.torch_kernels import sdpa_unsupported
from workers.building.torch_sessions import CudaGraphForward, TorchCompileSession, TorchEagerSession
from workers.building.variants import OnnxVariant, TorchVariant


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
    from tests.workers_support import export_digits_onnx

    path = export_digits_onnx(digits_module, tmp_path / "fixed.onnx", batch=4)
    assert OnnxRuntimeSession(path.read_bytes(), threads=1).fixed_batch == 4


def test_engine_and_variant_kind_must_match(
    digits_onnx: Path, digits_module: torch.nn.Module
) -> None:
    with pytest.raises(Unsupported):
        engine_of("torch_eager").session(
            OnnxVariant(digits_onnx.read_bytes()), parse_config({}, "torch")
        )
    with pytest.raises(Unsupported):
        engine_of("onnxruntime").session(TorchVariant(digits_module), parse_config({}, "torch"))


def test_registering_an_engine_twice_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(type(ENGINES["onnxruntime"]))


# --- kernel choices: strict refusals ---------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({"runtime.compile_mode": "max-autotune-no-cudagraphs"}, "runtime.compile_mode"),
        ({"runtime.provider": "cuda"}, "runtime.provider=cuda: runtime.engine=torch_eager"),
        ({"runtime.graph_opt": "basic"}, "runtime.graph_opt=basic"),
        ({"runtime.engine": "onnxruntime", "attention.sdpa_backend": "math"}, "sdpa_backend"),
        ({"runtime.engine": "onnxruntime", "cuda.cudnn_benchmark": True}, "cudnn_benchmark=true"),
        ({"runtime.engine": "onnxruntime", "cuda.graphs": True}, "cuda.graphs=true"),
        ({"runtime.engine": "onnxruntime", "shard.tensor_parallel": 2}, "tensor_parallel=2"),
        ({"runtime.engine": "onnxruntime", "shard.data_parallel": 2}, "data_parallel=2"),
        ({"runtime.engine": "torch_compile", "cuda.graphs": True}, "reduce-overhead captures"),
        ({"runtime.engine": "torch_compile", "shard.tensor_parallel": 2}, "with torch_eager"),
    ],
)
def test_a_setting_the_runtime_does_not_apply_is_refused(
    config: dict[str, ConfigValue], reason_part: str
) -> None:
    with pytest.raises(Unsupported, match=re.escape(reason_part)):
        check_runtime(parse_config(config, "torch"))


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({"cuda.cudnn_benchmark": True}, "cuda.cudnn_benchmark=true needs runtime.device=cuda"),
        ({"cuda.graphs": True}, "cuda.graphs=true needs runtime.device=cuda"),
        ({"attention.sdpa_backend": "efficient"}, "efficient has no CPU kernel"),
        ({"attention.sdpa_backend": "cudnn"}, "cudnn has no CPU kernel"),
        ({"runtime.engine": "torch_compile", "runtime.compile_mode": "reduce-overhead"}, "skips"),
        ({"runtime.engine": "torch_compile", "runtime.compile_mode": "max-autotune"}, "skips"),
        ({"shard.data_parallel": 2, "batch.size": 4}, "needs runtime.device=cuda"),
        ({"shard.data_parallel": 2, "shard.tensor_parallel": 2}, "one or the other"),
        ({"runtime.engine": "onnxruntime", "runtime.device": "cuda"}, "runtime.provider=cpu"),
    ],
)
def test_cpu_sessions_refuse_what_only_cuda_does(
    config: dict[str, ConfigValue], reason_part: str
) -> None:
    with pytest.raises(Unsupported, match=re.escape(reason_part)):
        check_runtime(parse_config({"runtime.device": "cpu", **config}, "torch"))


@pytest.mark.parametrize(
    "config",
    [
        {"attention.sdpa_backend": "math"},
        {"attention.sdpa_backend": "flash"},
        {"runtime.engine": "torch_compile", "runtime.compile_mode": "max-autotune-no-cudagraphs"},
        {"shard.tensor_parallel": 2},
        {"runtime.engine": "onnxruntime", "runtime.graph_opt": "disable"},
    ],
)
def test_settings_that_apply_on_the_cpu_pass_the_check(config: dict[str, ConfigValue]) -> None:
    check_runtime(parse_config(config, "torch"))


@no_cuda
@pytest.mark.parametrize("engine", ["torch_eager", "torch_compile"])
def test_cuda_without_a_gpu_is_unsupported(engine: str, digits_module: torch.nn.Module) -> None:
    config = parse_config({"runtime.engine": engine, "runtime.device": "cuda"}, "torch")
    with pytest.raises(Unsupported, match="no CUDA device is visible"):
        build_session(TorchVariant(digits_module), config)


def test_a_session_never_moves_the_callers_module(digits_module: torch.nn.Module) -> None:
    assert module_on(digits_module, torch.device("cpu")) is digits_module
    moved = module_on(digits_module, torch.device("meta"))
    assert moved is not digits_module and next(moved.parameters()).device.type == "meta"
    assert next(digits_module.parameters()).device.type == "cpu"


# --- torch.compile ---------------------------------------------------------------------------


@pytest.mark.slow  # inductor compiles C++ for the CPU: a few seconds warm, ~15 s cold
def test_torch_compile_matches_eager(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    eager = build_session(TorchVariant(digits_module), parse_config({}, "torch"))
    config = parse_config({"runtime.engine": "torch_compile", "runtime.threads": 1}, "torch")
    compiled = build_session(TorchVariant(digits_module), config)
    assert isinstance(compiled, TorchCompileSession) and compiled.mode == "default"
    batch = digits[0][:8]
    np.testing.assert_allclose(compiled.run(batch), eager.run(batch), atol=1e-4)
    np.testing.assert_allclose(compiled.run(batch), eager.run(batch), atol=1e-4)  # compiled once


def test_torch_compile_passes_its_mode(
    monkeypatch: pytest.MonkeyPatch, digits_module: torch.nn.Module
) -> None:
    calls: list[tuple[str | None, bool | None]] = []

    def fake_compile(module: torch.nn.Module, mode: str | None = None, dynamic: bool | None = None):  # type: ignore[no-untyped-def]
        calls.append((mode, dynamic))
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    config = parse_config(
        {"runtime.engine": "torch_compile", "runtime.compile_mode": "max-autotune-no-cudagraphs"},
        "torch",
    )
    session = build_session(TorchVariant(digits_module), config)
    assert calls == [("max-autotune-no-cudagraphs", False)]
    assert session.run(np.zeros((2, 1, 8, 8), np.float32)).shape == (2, 10)


# --- scaled-dot-product attention ------------------------------------------------------------


class TinyAttention(torch.nn.Module):
    """One attention block written with F.scaled_dot_product_attention."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return x + self.out(attended.transpose(1, 2).reshape(b, s, d))


def attention_models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    encoder = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    return {"functional": TinyAttention().eval(), "encoder_layer": encoder.eval()}


TOKENS = np.random.default_rng(0).standard_normal((3, 7, 16)).astype(np.float32)


@pytest.mark.parametrize("backend", ["math", "flash"])
@pytest.mark.parametrize("model", ["functional", "encoder_layer"])
def test_sdpa_backends_on_the_cpu_match_auto(model: str, backend: str) -> None:
    module = attention_models()[model]
    auto = build_session(TorchVariant(module), parse_config({}, "torch")).run(TOKENS)
    forced = build_session(
        TorchVariant(module), parse_config({"attention.sdpa_backend": backend}, "torch")
    )
    np.testing.assert_allclose(forced.run(TOKENS), auto, atol=1e-5)


def test_the_sdpa_backend_is_in_force_during_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, bool]] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append(
            (torch.backends.cuda.math_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled())
        )
        return sdpa(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    session = build_session(
        TorchVariant(TinyAttention().eval()),
        parse_config({"attention.sdpa_backend": "math"}, "torch"),
    )
    session.run(TOKENS)  # the first call also checks, with every backend off, that SDPA is used
    assert seen[0] == (False, False)
    seen.clear()
    session.run(TOKENS)
    assert seen == [(True, False)]
    assert torch.backends.cuda.flash_sdp_enabled(), "the backend choice must not outlive the call"


def test_an_sdpa_backend_for_a_model_without_attention_is_unsupported(
    digits_module: torch.nn.Module,
) -> None:
    session = build_session(
        TorchVariant(digits_module), parse_config({"attention.sdpa_backend": "math"}, "torch")
    )
    with pytest.raises(Unsupported, match="calls no scaled_dot_product_attention"):
        session.run(np.zeros((2, 1, 8, 8), np.float32))


def test_a_forced_backend_that_cannot_run_the_attention_is_unsupported() -> None:
    error = RuntimeError("No viable backend for scaled_dot_product_attention was found.\nmore")
    refused = sdpa_unsupported(error, "flash")
    assert isinstance(refused, Unsupported)
    assert str(refused) == (
        "attention.sdpa_backend=flash cannot run this model's attention: "
        "No viable backend for scaled_dot_product_attention was found."
    )
    assert sdpa_unsupported(error, "auto") is None
    assert sdpa_unsupported(RuntimeError("shape mismatch"), "flash") is None


# --- onnxruntime providers and graph levels --------------------------------------------------


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_onnxruntime_graph_levels_are_applied_and_agree(
    digits_onnx: Path, digits: tuple[np.ndarray, np.ndarray], level: str
) -> None:
    import onnxruntime

    config = parse_config({"runtime.threads": 1, "runtime.graph_opt": level}, "onnx")
    session = build_session(OnnxVariant(digits_onnx.read_bytes()), config)
    assert isinstance(session, OnnxRuntimeSession)
    options = session._session.get_session_options()
    expected = getattr(onnxruntime.GraphOptimizationLevel, ORT_GRAPH_LEVELS[level])
    assert options.graph_optimization_level == expected
    assert session.providers == ["CPUExecutionProvider"]
    reference = OnnxRuntimeSession(digits_onnx.read_bytes(), threads=1).run(digits[0][:16])
    np.testing.assert_allclose(session.run(digits[0][:16]), reference, atol=1e-5)


@pytest.mark.parametrize(
    ("provider", "name"),
    [("cuda", "CUDAExecutionProvider"), ("tensorrt", "TensorrtExecutionProvider")],
)
def test_an_unavailable_onnxruntime_provider_is_unsupported(
    digits_onnx: Path, provider: str, name: str
) -> None:
    import onnxruntime

    if name in onnxruntime.get_available_providers():
        pytest.skip(f"{name} is available here")
    with pytest.raises(Unsupported, match=f"runtime.provider={provider}: {name} is not available"):
        OnnxRuntimeSession(digits_onnx.read_bytes(), threads=1, provider=provider)
    config = parse_config({"runtime.provider": provider}, "onnx")
    with pytest.raises(Unsupported, match=name):
        check_runtime(config)


def test_a_provider_onnxruntime_silently_dropped_is_unsupported(
    digits_onnx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime

    real = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" in real:
        pytest.skip("CUDAExecutionProvider really is available")
    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *real]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnxruntime warns about the provider it drops
        with pytest.raises(Unsupported, match="fell back to CPUExecutionProvider"):
            OnnxRuntimeSession(digits_onnx.read_bytes(), threads=1, provider="cuda")


# --- CUDA (skipped without a GPU) ------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("engine", ["torch_eager", "torch_compile"])
def test_cuda_sessions_match_the_cpu(
    engine: str, digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    config = parse_config({"runtime.engine": engine, "runtime.device": "cuda"}, "torch")
    session = build_session(TorchVariant(digits_module), config)
    cpu = build_session(TorchVariant(digits_module), parse_config({}, "torch"))
    outputs = session.run(digits[0][:32])
    assert outputs.dtype == np.float32
    np.testing.assert_allclose(outputs, cpu.run(digits[0][:32]), atol=1e-4)
    assert next(digits_module.parameters()).device.type == "cpu"


@pytest.mark.gpu
@needs_cuda
def test_cuda_graphs_replay_per_shape(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    config = parse_config({"runtime.device": "cuda", "cuda.graphs": True}, "torch")
    session = build_session(TorchVariant(digits_module), config)
    cpu = build_session(TorchVariant(digits_module), parse_config({}, "torch"))
    for batch in (digits[0][:8], digits[0][8:16], digits[0][:3], digits[0][:8]):
        np.testing.assert_allclose(session.run(batch), cpu.run(batch), atol=1e-4)
    assert isinstance(session, TorchEagerSession)
    forward = session._forward
    assert isinstance(forward, CudaGraphForward) and len(forward._graphs) == 2


@pytest.mark.gpu
@needs_cuda
def test_cudnn_benchmark_is_set_for_the_call(digits_module: torch.nn.Module) -> None:
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = False
        config = parse_config({"runtime.device": "cuda", "cuda.cudnn_benchmark": True}, "torch")
        build_session(TorchVariant(digits_module), config).run(np.zeros((4, 1, 8, 8), np.float32))
        assert torch.backends.cudnn.benchmark
        plain = parse_config({"runtime.device": "cuda"}, "torch")
        build_session(TorchVariant(digits_module), plain).run(np.zeros((4, 1, 8, 8), np.float32))
        assert not torch.backends.cudnn.benchmark
    finally:
        torch.backends.cudnn.benchmark = before


@pytest.mark.gpu
@needs_cuda
def test_torch_compile_reduce_overhead_on_cuda(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    config = parse_config(
        {"runtime.engine": "torch_compile", "runtime.device": "cuda",
         "runtime.compile_mode": "reduce-overhead"},
        "torch",
    )  # fmt: skip
    session = build_session(TorchVariant(digits_module), config)
    cpu = build_session(TorchVariant(digits_module), parse_config({}, "torch"))
    for _ in range(3):  # cudagraph trees record on the second call, replay from the third
        np.testing.assert_allclose(session.run(digits[0][:8]), cpu.run(digits[0][:8]), atol=1e-4)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("backend", ["flash", "efficient", "math"])
def test_sdpa_backends_on_cuda(backend: str) -> None:
    module = TinyAttention().eval()
    variant = TorchVariant(module.half(), torch.float16)
    auto = build_session(variant, parse_config({"runtime.device": "cuda"}, "torch"))
    forced = build_session(
        variant,
        parse_config({"runtime.device": "cuda", "attention.sdpa_backend": backend}, "torch"),
    )
    np.testing.assert_allclose(forced.run(TOKENS), auto.run(TOKENS), atol=2e-2)


@pytest.mark.gpu
@needs_cuda
def test_onnxruntime_cuda_provider(
    digits_onnx: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime build has no CUDAExecutionProvider")
    session = OnnxRuntimeSession(digits_onnx.read_bytes(), threads=1, provider="cuda")
    assert session.providers[0] == "CUDAExecutionProvider"
    reference = OnnxRuntimeSession(digits_onnx.read_bytes(), threads=1)
    np.testing.assert_allclose(
        session.run(digits[0][:16]), reference.run(digits[0][:16]), atol=1e-4
    )


@pytest.mark.gpu
@needs_two_gpus
def test_data_parallel_splits_the_batch_over_gpus(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    from workers.building.sharding import DataParallelSession

    config = parse_config(
        {"runtime.device": "cuda", "shard.data_parallel": 2, "batch.size": 8}, "torch"
    )
    session = build_session(TorchVariant(digits_module), config)
    assert isinstance(session, DataParallelSession)
    cpu = build_session(TorchVariant(digits_module), parse_config({}, "torch"))
    for size in (8, 9, 1):
        np.testing.assert_allclose(
            session.run(digits[0][:size]), cpu.run(digits[0][:size]), atol=1e-4
        )
