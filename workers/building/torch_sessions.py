"""torch sessions on the CPU or CUDA: eager (optionally replaying CUDA graphs) and
`torch.compile`d."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.building.torch_io import ReadsTorchOutputs, TorchOutputs, module_on, torch_inputs
from workers.building.torch_kernels import TorchKernels, check_attention_used, sdpa_unsupported
from workers.building.variants import TorchVariant

if TYPE_CHECKING:
    import torch


class TorchEagerSession(ReadsTorchOutputs):
    """Runs a torch module in inference mode on the CPU or CUDA (optionally replaying a CUDA
    graph per input shape); floating outputs come back as float32 numpy arrays, several as one
    structured array (`torch_io.TorchOutputs`), nested as `output_structure` says. Takes
    batches of the variant's `fixed_batch` alone, where it has one."""

    def __init__(
        self,
        variant: TorchVariant,
        threads: int,
        device: str = "cpu",
        kernels: TorchKernels | None = None,
        cuda_graphs: bool = False,
    ) -> None:
        import torch

        self.fixed_batch = variant.fixed_batch
        self._outputs = TorchOutputs(variant.fixed_batch)
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
            return self._outputs.numpy(outputs, batch.shape[0])


class CudaGraphForward:
    """Captures the module's forward in a CUDA graph for each input shape and dtype (static
    input and output buffers), then replays it: inputs are copied into the static input, the
    static output is returned (valid until the next replay)."""

    WARMUP_CALLS = 3

    def __init__(self, module: torch.nn.Module) -> None:
        self._module = module
        self._graphs: dict[tuple[tuple[int, ...], Any], tuple[Any, Any, Any]] = {}

    def __call__(self, inputs: torch.Tensor) -> Any:
        key = (tuple(inputs.shape), inputs.dtype)
        if key not in self._graphs:
            self._graphs[key] = self._capture(inputs)
        static_input, graph, static_output = self._graphs[key]
        static_input.copy_(inputs)
        graph.replay()
        return static_output

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
            static_output = self._module(static_input)
        return static_input, graph, static_output


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
