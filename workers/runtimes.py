"""Runtimes: each builds an inference session for a variant, exposing `run(batch) -> outputs`.

Sessions take and return numpy arrays on the host, so the time of moving data in and out of the
framework (and on CUDA to and from the device) is part of every measured call.

Which trial settings each registered runtime applies; any other setting must keep its default,
or the session is refused with `Unsupported` (a trial never claims a setting it did not apply),
and so is a setting this machine cannot honour:

- torch_eager: runtime.device (cpu, cuda), attention.sdpa_backend (CPU: auto, math, flash),
  cuda.cudnn_benchmark and cuda.graphs (CUDA only), shard.tensor_parallel (CPU over gloo, CUDA
  over NCCL), shard.data_parallel (CUDA only).
- torch_compile: runtime.device, runtime.compile_mode (CPU: default and
  max-autotune-no-cudagraphs; the CUDA-graph modes need CUDA), attention.sdpa_backend,
  cuda.cudnn_benchmark, shard.data_parallel. CUDA graphs come from mode reduce-overhead.
- onnxruntime: runtime.provider (cpu, cuda, tensorrt; must be available and really used),
  runtime.graph_opt. It runs where its provider does (runtime.device=cuda needs a GPU provider).

Sharded sessions (`workers.sharding`) run in several processes or on several devices and must be
closed: use `opened(session)` or `close_session(session)`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from autotune.errors import Unsupported
from workers.config import TrialConfig
from workers.variants import OnnxVariant, TorchVariant, Variant

if TYPE_CHECKING:
    import torch

    from workers.sharding import ModelSource


class Session(Protocol):
    @property
    def fixed_batch(self) -> int | None:
        """The only batch size the model accepts, or None when its batch axis is dynamic."""

    def run(self, batch: np.ndarray) -> np.ndarray: ...


Runtime = Callable[[Variant, TrialConfig], Session]

RUNTIMES: dict[str, Runtime] = {}
# Per runtime, the TrialConfig fields (besides batch size, precision, pruning, threads and
# device) that it applies; every other field of `_OPTION_KEYS` must keep its default.
RUNTIME_OPTIONS: dict[str, frozenset[str]] = {}

# TrialConfig field -> (configuration key, default value)
_OPTION_KEYS: dict[str, tuple[str, object]] = {
    "compile_mode": ("runtime.compile_mode", "default"),
    "ort_provider": ("runtime.provider", "cpu"),
    "ort_graph_opt": ("runtime.graph_opt", "all"),
    "sdpa_backend": ("attention.sdpa_backend", "auto"),
    "cudnn_benchmark": ("cuda.cudnn_benchmark", False),
    "cuda_graphs": ("cuda.graphs", False),
    "tensor_parallel": ("shard.tensor_parallel", 1),
    "data_parallel": ("shard.data_parallel", 1),
}
# Why a runtime does not take a setting, where something else does the job.
_HINTS = {
    ("torch_compile", "cuda_graphs"): "; runtime.compile_mode=reduce-overhead captures CUDA graphs",
    ("torch_compile", "tensor_parallel"): "; tensor parallelism runs with torch_eager",
}


def register_runtime(
    name: str, options: frozenset[str] = frozenset()
) -> Callable[[Runtime], Runtime]:
    """Register a runtime under `name`; `options` names the TrialConfig fields it applies."""
    unknown = options - _OPTION_KEYS.keys()
    if unknown:
        raise ValueError(f"unknown runtime options {sorted(unknown)}")

    def register(runtime: Runtime) -> Runtime:
        if name in RUNTIMES:
            raise ValueError(f"runtime {name!r} is already registered")
        RUNTIMES[name] = runtime
        RUNTIME_OPTIONS[name] = options
        return runtime

    return register


def build_session(
    variant: Variant, config: TrialConfig, source: ModelSource | None = None
) -> Session:
    """The session of `config.engine` for `variant`. Tensor-parallel sessions start worker
    processes that rebuild the variant themselves from `source`."""
    check_runtime(config)
    if config.tensor_parallel > 1:
        from workers.sharding import tensor_parallel_session

        return tensor_parallel_session(variant, config, source)
    return RUNTIMES[config.engine](variant, config)


def close_session(session: Session) -> None:
    """Release what a session holds (worker processes, device memory); a no-op for most."""
    close = getattr(session, "close", None)
    if callable(close):
        close()


@contextlib.contextmanager
def opened(session: Session) -> Iterator[Session]:
    try:
        yield session
    finally:
        close_session(session)


def helper_pids(session: Session) -> tuple[int, ...]:
    """Processes besides this one that do the session's work (their CPU time and memory are
    the trial's too)."""
    return tuple(getattr(session, "helper_pids", ()))


# ---------------------------------------------------------------------------------------------
# Checks that need only the configuration (cheap: run before a variant is built)


def check_runtime(config: TrialConfig) -> None:
    """Raise `Unsupported` for a setting the runtime does not apply or this machine cannot
    honour."""
    if config.engine not in RUNTIMES:
        raise Unsupported(f"runtime.engine={config.engine} has no runtime here")
    applied = RUNTIME_OPTIONS[config.engine]
    for field, (key, default) in _OPTION_KEYS.items():
        value = getattr(config, field)
        if field not in applied and value != default:
            hint = _HINTS.get((config.engine, field), "")
            raise Unsupported(
                f"{key}={_show(value)}: runtime.engine={config.engine} does not apply it{hint}"
            )
    if config.engine == "onnxruntime":
        _check_onnxruntime(config)
    else:
        _check_torch(config)
    _check_sharding(config)


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# compile modes whose point is CUDA graphs; on the CPU inductor silently skips that part.
_CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")
# SDPA backends with no CPU kernel (torch has a CPU flash-attention kernel, and math runs anywhere).
_CUDA_ONLY_SDPA = ("efficient", "cudnn")


def _check_torch(config: TrialConfig) -> None:
    if config.device == "cuda":
        require_cuda("runtime.device=cuda")
        return
    if config.cudnn_benchmark:
        raise Unsupported("cuda.cudnn_benchmark=true needs runtime.device=cuda (no cuDNN on CPU)")
    if config.cuda_graphs:
        raise Unsupported("cuda.graphs=true needs runtime.device=cuda")
    if config.engine == "torch_compile" and config.compile_mode in _CUDA_GRAPH_COMPILE_MODES:
        raise Unsupported(
            f"runtime.compile_mode={config.compile_mode} captures CUDA graphs, which inductor "
            "skips on the CPU (it would run as mode default); it needs runtime.device=cuda"
        )
    if config.sdpa_backend in _CUDA_ONLY_SDPA:
        raise Unsupported(
            f"attention.sdpa_backend={config.sdpa_backend} has no CPU kernel; "
            "it needs runtime.device=cuda"
        )


def require_cuda(what: str, devices: int = 1) -> None:
    import torch

    if not torch.cuda.is_available():
        # the transforms' wording for the same check, whichever comes first
        raise Unsupported(f"{what} but no CUDA device is visible")
    if torch.cuda.device_count() < devices:
        raise Unsupported(
            f"{what} needs {devices} CUDA devices; {torch.cuda.device_count()} are visible"
        )


def _check_sharding(config: TrialConfig) -> None:
    tp, dp = config.tensor_parallel, config.data_parallel
    if tp > 1 and dp > 1:
        raise Unsupported(
            f"shard.tensor_parallel={tp} with shard.data_parallel={dp}: one or the other"
        )
    if (tp > 1 or dp > 1) and config.cuda_graphs:
        raise Unsupported("cuda.graphs=true is not captured across sharded replicas or ranks")
    if tp > 1 and config.device == "cuda":
        require_cuda(f"shard.tensor_parallel={tp}", devices=tp)
    if dp > 1:
        if config.device != "cuda":
            raise Unsupported(
                f"shard.data_parallel={dp} places one replica per CUDA device; "
                "it needs runtime.device=cuda"
            )
        require_cuda(f"shard.data_parallel={dp}", devices=dp)
        if config.batch_size < dp:
            raise Unsupported(
                f"shard.data_parallel={dp} with batch.size={config.batch_size} would leave "
                "replicas idle"
            )


# ORT provider lists, most preferred first; the first one is the one the trial asks for.
ORT_PROVIDERS: dict[str, tuple[str, ...]] = {
    "cpu": ("CPUExecutionProvider",),
    "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "tensorrt": (
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ),
}
ORT_GRAPH_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def _check_onnxruntime(config: TrialConfig) -> None:
    import onnxruntime

    if config.device == "cuda" and config.ort_provider == "cpu":
        raise Unsupported(
            "runtime.device=cuda with runtime.provider=cpu: onnxruntime runs where its provider "
            "does; ask for runtime.provider=cuda or tensorrt"
        )
    wanted = ORT_PROVIDERS[config.ort_provider][0]
    available = onnxruntime.get_available_providers()
    if wanted not in available:
        raise Unsupported(
            f"runtime.provider={config.ort_provider}: {wanted} is not available in this "
            f"onnxruntime build (available: {', '.join(available)})"
        )


# ---------------------------------------------------------------------------------------------
# torch sessions


class TorchKernels:
    """Process-wide kernel settings a torch session re-asserts on every call (another session,
    e.g. the reference model's, may have changed them since), and the per-call SDPA backend."""

    def __init__(
        self, threads: int, sdpa_backend: str = "auto", cudnn_benchmark: bool | None = None
    ) -> None:
        import torch

        self._torch = torch
        self.threads = threads
        self.sdpa_backend = sdpa_backend
        self._cudnn_benchmark = cudnn_benchmark  # None: a CPU session leaves the flag alone
        self._backend = sdpa_backend_enum(sdpa_backend)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        torch = self._torch
        # Checking costs well under a microsecond; setting only happens after a change.
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        if (
            self._cudnn_benchmark is not None
            and torch.backends.cudnn.benchmark != self._cudnn_benchmark
        ):
            torch.backends.cudnn.benchmark = self._cudnn_benchmark
        with torch.inference_mode():
            if self._backend is None:
                yield
            else:
                from torch.nn.attention import sdpa_kernel

                with sdpa_kernel(self._backend):
                    yield


_SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
    "cudnn": "CUDNN_ATTENTION",
}
_NO_SDPA_KERNEL = "No viable backend for scaled_dot_product_attention"


def sdpa_backend_enum(name: str) -> Any:
    """torch's SDPBackend member for an `attention.sdpa_backend` value; None for auto."""
    if name == "auto":
        return None
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, _SDPA_BACKENDS[name])


def kernels_for(config: TrialConfig, threads: int | None = None) -> TorchKernels:
    return TorchKernels(
        threads if threads is not None else config.threads,
        config.sdpa_backend,
        config.cudnn_benchmark if config.device == "cuda" else None,
    )


def check_attention_used(module: torch.nn.Module, inputs: torch.Tensor, backend: str) -> None:
    """Refuse an SDPA backend for a model that has no scaled-dot-product attention (the setting
    would change nothing). nn.MultiheadAttention counts; otherwise one forward runs with every
    SDPA backend disabled, which fails at the model's first scaled_dot_product_attention."""
    from torch import nn
    from torch.nn.attention import sdpa_kernel

    if any(isinstance(child, nn.MultiheadAttention) for child in module.modules()):
        return
    try:
        with sdpa_kernel([]):
            module(inputs)
    except RuntimeError as error:
        if _NO_SDPA_KERNEL in str(error):
            return
        raise
    raise Unsupported(
        f"attention.sdpa_backend={backend}: the model calls no scaled_dot_product_attention, "
        "so the setting would change nothing"
    )


def sdpa_unsupported(error: Exception, backend: str) -> Unsupported | None:
    """The `Unsupported` for a forward that the forced SDPA backend cannot run (its inputs'
    dtype, shape or mask are outside what that kernel takes), else None."""
    if backend == "auto" or _NO_SDPA_KERNEL not in str(error):
        return None
    return Unsupported(
        f"attention.sdpa_backend={backend} cannot run this model's attention: "
        + str(error).strip().splitlines()[0]
    )


def module_on(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """`module` if its parameters and buffers are all on `device`, else a copy moved there
    (never moves the caller's module: it may be the store's original)."""
    tensors = [*module.parameters(), *module.buffers()]
    if all(_same_device(t.device, device) for t in tensors):
        return module
    return copy.deepcopy(module).to(device)


def _same_device(actual: torch.device, wanted: torch.device) -> bool:
    if actual.type != wanted.type:
        return False
    if wanted.type != "cuda":
        return True
    import torch

    index = wanted.index if wanted.index is not None else torch.cuda.current_device()
    return actual.index == index


def torch_inputs(
    batch: np.ndarray, dtype: torch.dtype | None, device: torch.device
) -> torch.Tensor:
    import torch

    inputs = torch.from_numpy(batch)
    if dtype is not None and inputs.is_floating_point():
        return inputs.to(device=device, dtype=dtype)
    return inputs.to(device)


class TorchEagerSession:
    """Runs a torch module in inference mode on the CPU or CUDA (optionally replaying a CUDA
    graph per input shape); floating outputs come back as float32 numpy arrays."""

    fixed_batch: int | None = None

    def __init__(
        self,
        variant: TorchVariant,
        threads: int,
        device: str = "cpu",
        kernels: TorchKernels | None = None,
        cuda_graphs: bool = False,
    ) -> None:
        import torch

        self._device = torch.device(device)
        self._module = module_on(variant.module, self._device)
        self._input_dtype = variant.input_dtype
        self._kernels = kernels or TorchKernels(threads)
        self._forward: Callable[[torch.Tensor], Any] = self._module
        if cuda_graphs:
            self._forward = CudaGraphForward(self._module)
        self._attention_unchecked = self._kernels.sdpa_backend != "auto"

    def run(self, batch: np.ndarray) -> np.ndarray:
        with self._kernels.applied():
            inputs = torch_inputs(batch, self._input_dtype, self._device)
            if self._attention_unchecked:  # eagerly, once: dynamo must not trace the probe
                check_attention_used(self._module, inputs, self._kernels.sdpa_backend)
                self._attention_unchecked = False
            try:
                outputs = self._forward(inputs)
            except Exception as error:
                refused = sdpa_unsupported(error, self._kernels.sdpa_backend)
                if refused is not None:
                    raise refused from error
                raise
            return to_numpy(first_tensor(outputs))


class CudaGraphForward:
    """Captures the module's forward in a CUDA graph for each input shape and dtype (static
    input and output buffers), then replays it: inputs are copied into the static input, the
    static output is returned (valid until the next replay)."""

    WARMUP_CALLS = 3

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = module
        self._graphs: dict[tuple[tuple[int, ...], Any], tuple[Any, Any, Any]] = {}

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        key = (tuple(inputs.shape), inputs.dtype)
        if key not in self._graphs:
            self._graphs[key] = self._capture(inputs)
        static_input, graph, static_output = self._graphs[key]
        static_input.copy_(inputs)
        graph.replay()
        return static_output  # type: ignore[no-any-return]

    def _capture(self, inputs: torch.Tensor) -> tuple[Any, Any, Any]:
        import torch

        static_input = inputs.clone()
        side = torch.cuda.Stream(device=inputs.device)
        side.wait_stream(torch.cuda.current_stream(inputs.device))
        with torch.cuda.stream(side):  # warm-up (cuDNN/cuBLAS workspaces, lazy init) off-graph
            for _ in range(self.WARMUP_CALLS):
                self._module(static_input)
        torch.cuda.current_stream(inputs.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = first_tensor(self._module(static_input))
        return static_input, graph, static_output


def first_tensor(outputs: Any) -> torch.Tensor:
    """The model's output tensor; of a tuple or list of outputs, the first."""
    import torch

    while isinstance(outputs, tuple | list) and outputs:
        outputs = outputs[0]
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"the model must return a tensor, got {type(outputs).__name__}")
    return outputs


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    if tensor.is_floating_point():
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()  # .cpu() waits for the device


def _torch_variant(variant: Variant, engine: str) -> TorchVariant:
    if not isinstance(variant, TorchVariant):
        raise Unsupported(f"runtime.engine={engine} runs torch models only")
    return variant


_TORCH_EAGER_OPTIONS = frozenset(
    {"sdpa_backend", "cudnn_benchmark", "cuda_graphs", "tensor_parallel", "data_parallel"}
)


@register_runtime("torch_eager", _TORCH_EAGER_OPTIONS)
def torch_eager(variant: Variant, config: TrialConfig) -> Session:
    torch_variant = _torch_variant(variant, "torch_eager")
    if config.data_parallel > 1:
        from workers.sharding import DataParallelSession

        return DataParallelSession(torch_variant, config)
    return TorchEagerSession(
        torch_variant,
        config.threads,
        device=config.device,
        kernels=kernels_for(config),
        cuda_graphs=config.cuda_graphs,
    )


class TorchCompileSession(TorchEagerSession):
    """`torch.compile(module, mode=..., dynamic=False)` run in inference mode.

    Compiling happens on the first call with each input shape (dynamic=False: a new batch size
    is a new graph), so the warm-up before timing covers it. Dynamo's caches are reset when the
    session is built, so a long-lived worker does not reach dynamo's recompile limit (beyond it
    dynamo would silently run the model eagerly).
    """

    def __init__(
        self,
        variant: TorchVariant,
        threads: int,
        device: str = "cpu",
        mode: str = "default",
        kernels: TorchKernels | None = None,
    ) -> None:
        import torch

        torch._dynamo.reset()
        super().__init__(variant, threads, device, kernels)
        self.mode = mode
        self._forward = compile_module(self._module, mode)


def compile_module(module: torch.nn.Module, mode: str) -> Callable[[torch.Tensor], Any]:
    import torch

    return torch.compile(module, mode=mode, dynamic=False)  # type: ignore[no-any-return]


@register_runtime(
    "torch_compile", frozenset({"compile_mode", "sdpa_backend", "cudnn_benchmark", "data_parallel"})
)
def torch_compile(variant: Variant, config: TrialConfig) -> Session:
    torch_variant = _torch_variant(variant, "torch_compile")
    if config.data_parallel > 1:
        from workers.sharding import DataParallelSession

        return DataParallelSession(torch_variant, config)
    return TorchCompileSession(
        torch_variant,
        config.threads,
        device=config.device,
        mode=config.compile_mode,
        kernels=kernels_for(config),
    )


# ---------------------------------------------------------------------------------------------
# onnxruntime

# onnxruntime's input type names and the numpy dtype fed to each.
_ORT_INPUT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
    "tensor(bool)": np.bool_,
}


class OnnxRuntimeSession:
    """An onnxruntime session with a provider list and a graph optimization level; returns the
    model's first output. Refuses (`Unsupported`) a provider that is not available or that the
    session silently replaced by a fallback."""

    def __init__(
        self, model_bytes: bytes, threads: int, provider: str = "cpu", graph_opt: str = "all"
    ) -> None:
        import onnxruntime

        providers = list(ORT_PROVIDERS[provider])
        available = onnxruntime.get_available_providers()
        if providers[0] not in available:
            raise Unsupported(
                f"runtime.provider={provider}: {providers[0]} is not available in this "
                f"onnxruntime build (available: {', '.join(available)})"
            )
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = getattr(
            onnxruntime.GraphOptimizationLevel, ORT_GRAPH_LEVELS[graph_opt]
        )
        self._session = onnxruntime.InferenceSession(model_bytes, options, providers=providers)
        self.providers: list[str] = list(self._session.get_providers())
        if providers[0] not in self.providers:
            raise Unsupported(
                f"runtime.provider={provider}: onnxruntime could not start {providers[0]} and "
                f"fell back to {', '.join(self.providers)}"
            )
        inputs = self._session.get_inputs()
        if len(inputs) != 1:
            raise Unsupported(f"the model takes {len(inputs)} inputs; autotune feeds exactly one")
        self._input_name = inputs[0].name
        self._input_dtype = _ORT_INPUT_TYPES.get(inputs[0].type)
        if self._input_dtype is None:
            raise Unsupported(f"the model's input type {inputs[0].type} is not supported")
        leading = inputs[0].shape[0] if inputs[0].shape else None
        self.fixed_batch: int | None = leading if isinstance(leading, int) else None

    def run(self, batch: np.ndarray) -> np.ndarray:
        feed = {self._input_name: batch.astype(self._input_dtype, copy=False)}
        return np.asarray(self._session.run(None, feed)[0])


@register_runtime("onnxruntime", frozenset({"ort_provider", "ort_graph_opt"}))
def onnxruntime_session(variant: Variant, config: TrialConfig) -> Session:
    if not isinstance(variant, OnnxVariant):
        raise Unsupported("runtime.engine=onnxruntime needs an ONNX variant")
    return OnnxRuntimeSession(
        variant.model_bytes, config.threads, config.ort_provider, config.ort_graph_opt
    )
