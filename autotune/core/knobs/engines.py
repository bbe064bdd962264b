"""The torch and ONNX Runtime engines, declared. Each applies the settings it declares; any other
must keep its default, or the configuration is refused (a trial never claims a setting it did not
apply).

- torch_eager: runtime.device (cpu, cuda), attention.sdpa_backend (CPU: auto, math, flash),
  cuda.cudnn_benchmark and cuda.graphs (CUDA only), shard.tensor_parallel (CPU over gloo, CUDA
  over NCCL), shard.data_parallel (CUDA only), precision.fallback (int8_dynamic only, which
  runs on the CPU alone: how many of the Linear modules most sensitive to quantization stay in
  float; not with tensor parallelism).
- torch_compile: runtime.device, runtime.compile_mode (CPU: default and
  max-autotune-no-cudagraphs; the CUDA-graph modes need CUDA), attention.sdpa_backend,
  cuda.cudnn_benchmark, shard.data_parallel, precision.fallback (as torch_eager). CUDA graphs
  come from mode reduce-overhead.
- onnxruntime: runtime.provider (the execution providers of `providers.py`; must be
  available and really used) and each provider's options (runtime.provider.<provider>.<option>,
  only those of the provider and its fallbacks),
  runtime.graph_opt, precision.fallback (int8 modes only: how many of the nodes most sensitive
  to quantization stay in float), and how its static int8 quantizer works (int8_static only):
  precision.calibration (minmax, entropy, percentile), precision.per_channel (weights),
  precision.symmetric_activations and precision.op_types (all, matmul_only). It runs where its
  provider does (runtime.device=cuda needs a GPU provider). OpenVINO (`openvino.py`) applies
  the same static int8 settings through NNCF, except the entropy calibration.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from autotune.core.knobs.base import (
    DEVICE_KEY,
    PRECISION_KEY,
    Engine,
    Option,
    Package,
    Target,
    option_default,
    register,
)
from autotune.core.knobs.providers import PROVIDER_KEY, PROVIDERS, ExecutionProvider

if TYPE_CHECKING:
    from autotune.core.contract import HardwareProfile
    from autotune.core.knobs.config import TrialConfig

# Shared TrialConfig fields an engine may apply: field -> (configuration key, default).
SHARED_OPTIONS: dict[str, tuple[str, object]] = {
    "sdpa_backend": ("attention.sdpa_backend", "auto"),
    "cudnn_benchmark": ("cuda.cudnn_benchmark", False),
    "cuda_graphs": ("cuda.graphs", False),
    "tensor_parallel": ("shard.tensor_parallel", 1),
    "data_parallel": ("shard.data_parallel", 1),
    "fallback": ("precision.fallback", 0),
}
# compile modes whose point is CUDA graphs; on the CPU inductor silently skips that part.
_CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")
# SDPA backends with no CPU kernel (torch has a CPU flash-attention kernel; math runs anywhere).
_CUDA_ONLY_SDPA = ("efficient", "cudnn")
COMPILE_MODE = Option(
    "runtime.compile_mode",
    ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    "default",
)
ORT_PROVIDER = Option(PROVIDER_KEY, tuple(PROVIDERS), "cpu")
# runtime.graph_opt -> ONNX Runtime's GraphOptimizationLevel name.
ORT_GRAPH_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
# The modes whose quantizer can leave named nodes in float (`precision.fallback`).
INT8_MODES = ("int8_dynamic", "int8_static")
ORT_GRAPH_OPT = Option("runtime.graph_opt", ("disable", "basic", "extended", "all"), "all")
# How ONNX Runtime's static int8 quantizer (precision.mode=int8_static) quantizes; each changes
# the model, and each default is what the quantizer did before they could be chosen.
STATIC_INT8_MODE = "int8_static"
CALIBRATION = Option(
    "precision.calibration", ("minmax", "entropy", "percentile"), "minmax", defines_variant=True
)
PER_CHANNEL = Option("precision.per_channel", (True, False), True, defines_variant=True)
SYMMETRIC_ACTIVATIONS = Option(
    "precision.symmetric_activations", (False, True), False, defines_variant=True
)
OP_TYPES = Option("precision.op_types", ("all", "matmul_only"), "all", defines_variant=True)
STATIC_INT8_OPTIONS = (CALIBRATION, PER_CHANNEL, SYMMETRIC_ACTIVATIONS, OP_TYPES)
# Each registered provider's options, `runtime.provider.<provider>.<option>`, by provider.
OPTIONS_OF_PROVIDER = {name: provider.option_keys() for name, provider in PROVIDERS.items()}
PROVIDER_OPTIONS = tuple(o for options in OPTIONS_OF_PROVIDER.values() for o in options)


def foreign_setting(engine: Engine, config: TrialConfig, hints: dict[str, str]) -> str | None:
    """A setting `engine` does not apply, left at something other than its default: a shared
    field it does not list in `applies`, or another engine's option."""
    for field, (key, default) in SHARED_OPTIONS.items():
        value = getattr(config, field)
        if field not in engine.applies and value != default:
            return f"{key}={_show(value)}: {engine.key}={engine.name} does not apply it" + (
                hints.get(field, "")
            )
    own = {option.key for option in engine.options}
    for key, value in config.options.items():
        if key in own:
            continue
        if value != option_default(key):
            return f"{key}={_show(value)}: {engine.key}={engine.name} does not apply it"
    return None


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# The torch mode whose quantizer can leave named Linear modules in float (`precision.fallback`).
TORCH_INT8_MODE = "int8_dynamic"


class TorchEngine(Engine):
    model_format = "torch"
    precisions = frozenset({"fp32", "bf16", "fp16", "int8_dynamic", "fp8"})
    precision_devices = {
        "fp16": ("cuda", f"{PRECISION_KEY}=fp16 needs CUDA ({DEVICE_KEY}=cuda)"),
        "int8_dynamic": (
            "cpu",
            f"{PRECISION_KEY}=int8_dynamic: torch's dynamic int8 quantization has CPU kernels only",
        ),
    }
    software = ("torch",)
    served_as = "files"  # MLflow's pytorch flavour would pickle the module
    hints: ClassVar[dict[str, str]] = {}

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        return (
            foreign_setting(self, config, self.hints)
            or super().supports(config, target)
            or _torch_fallback_reason(config)
            or _torch_device_reason(config, target)
        )


def _torch_fallback_reason(config: TrialConfig) -> str | None:
    """Why torch cannot keep `precision.fallback` modules in float: only its dynamic int8
    quantizer leaves named Linear modules alone, and tensor-parallel ranks rebuild and split
    the model without the ranking."""
    if not config.fallback:
        return None
    if config.precision != TORCH_INT8_MODE:
        return (
            f"precision.fallback={config.fallback} keeps Linear modules of an int8 model in "
            f"float; on torch {PRECISION_KEY}={config.precision} is not {TORCH_INT8_MODE}"
        )
    if config.tensor_parallel > 1:
        return (
            f"precision.fallback={config.fallback} with shard.tensor_parallel="
            f"{config.tensor_parallel}: the ranks rebuild the model without its ranking"
        )
    return None


def _torch_device_reason(config: TrialConfig, target: Target) -> str | None:
    on_cuda = config.device == "cuda"
    if on_cuda and "cuda" not in target.capabilities:
        return "runtime.device=cuda but no CUDA device is visible"
    if on_cuda:
        return None
    if config.cudnn_benchmark:
        return "cuda.cudnn_benchmark=true needs runtime.device=cuda (no cuDNN on CPU)"
    if config.cuda_graphs:
        return "cuda.graphs=true needs runtime.device=cuda"
    if config.sdpa_backend in _CUDA_ONLY_SDPA:
        return (
            f"attention.sdpa_backend={config.sdpa_backend} has no CPU kernel; "
            "it needs runtime.device=cuda"
        )
    return None


@register
class TorchEager(TorchEngine):
    name = "torch_eager"
    applies = frozenset(SHARED_OPTIONS)
    concurrent_calls = True


@register
class TorchCompile(TorchEngine):
    name = "torch_compile"
    options = (COMPILE_MODE,)
    needs = ("torch.compile",)
    provides = ("torch.compile",)
    applies = frozenset({"sdpa_backend", "cudnn_benchmark", "data_parallel", "fallback"})
    hints = {
        "cuda_graphs": "; runtime.compile_mode=reduce-overhead captures CUDA graphs",
        "tensor_parallel": "; tensor parallelism runs with torch_eager",
    }

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        mode = config.option(COMPILE_MODE.key)
        if config.device != "cuda" and mode in _CUDA_GRAPH_COMPILE_MODES:
            return (
                f"runtime.compile_mode={mode} captures CUDA graphs, which inductor skips on "
                "the CPU (it would run as mode default); it needs runtime.device=cuda"
            )
        return super().supports(config, target)

    def offered(self, profile: HardwareProfile) -> set[str]:
        """torch.compile where inductor can build kernels on the node
        (`HardwareProfile.torch_compile`)."""
        return set(self.provides) if profile.torch_compile else set()


@register
class OnnxRuntime(Engine):
    name = "onnxruntime"
    model_format = "onnx"
    precisions = frozenset({"fp32", "fp16", "int8_dynamic", "int8_static", "int4_weight_only"})
    options = (ORT_PROVIDER, ORT_GRAPH_OPT, *STATIC_INT8_OPTIONS, *PROVIDER_OPTIONS)
    applies = frozenset({"fallback"})
    needs = ("|".join(provider.capability for provider in PROVIDERS.values()),)
    provides = tuple(provider.capability for provider in PROVIDERS.values())
    package = Package("onnxruntime", ("cpu", "gpu"))
    software = ("onnxruntime", "onnx")
    concurrent_calls = True
    served_as = "onnx"

    def supports(self, config: TrialConfig, target: Target) -> str | None:
        provider = provider_of(config)
        reason = (
            foreign_setting(self, config, {})
            or super().supports(config, target)
            or provider.unavailable(target)
            or provider.refuses_device(config.device)
        )
        if reason is not None:
            return reason
        if config.fallback and config.precision not in INT8_MODES:
            return (
                f"precision.fallback={config.fallback} keeps nodes of an int8 model in float; "
                f"{PRECISION_KEY}={config.precision} is not one of {list(INT8_MODES)}"
            )
        if config.precision != STATIC_INT8_MODE:
            reason = static_int8_setting(config)
            if reason is not None:
                return reason
        return provider.refuses_precision(config.precision) or unused_provider_option(config)

    def on_cuda(self, config: TrialConfig) -> bool:
        return provider_of(config).device == "cuda"

    def offered(self, profile: HardwareProfile) -> set[str]:
        """ort.<provider> for each runtime.provider whose execution provider the node's ONNX
        Runtime has (`HardwareProfile.onnxruntime_providers`)."""
        return {
            provider.capability
            for provider in PROVIDERS.values()
            if provider.ort_name in profile.onnxruntime_providers
        }


def provider_of(config: TrialConfig) -> ExecutionProvider:
    """The execution provider a configuration asks for (`runtime.provider`)."""
    return PROVIDERS[str(config.option(ORT_PROVIDER.key))]


def unused_provider_option(config: TrialConfig) -> str | None:
    """Why a configuration cannot set an option of a provider its session does not use (not
    the provider it asks for, nor one of that provider's fallbacks) away from its default."""
    chosen = provider_of(config)
    for name, options in OPTIONS_OF_PROVIDER.items():
        if name in (chosen.name, *chosen.fallbacks):
            continue
        setting = _first_set(config, options)
        if setting is not None:
            return (
                f"{setting} is an option of {PROVIDER_KEY}={name}; "
                f"a session of {PROVIDER_KEY}={chosen.name} does not use it"
            )
    return None


def static_int8_setting(config: TrialConfig) -> str | None:
    """Why a configuration whose precision is not int8_static cannot set a static int8
    quantizer setting away from its default, or None where it leaves them all at it."""
    setting = _first_set(config, STATIC_INT8_OPTIONS)
    if setting is None:
        return None
    return (
        f"{setting} sets how static int8 quantizes; it applies to "
        f"{PRECISION_KEY}={STATIC_INT8_MODE} only, not {config.precision}"
    )


def _first_set(config: TrialConfig, options: Iterable[Option]) -> str | None:
    """'key=value' of the first of `options` that the configuration sets away from its
    default, or None."""
    for option in options:
        value = config.option(option.key)
        if value != option.default:
            return f"{option.key}={_show(value)}"
    return None
