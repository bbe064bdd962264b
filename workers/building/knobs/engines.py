"""How the torch and ONNX Runtime engines (`autotune.core.knobs.engines`) check the machine and
build their sessions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.core.errors import Unsupported
from autotune.core.knobs.engines import (
    COMPILE_MODE,
    ORT_GRAPH_OPT,
    ORT_PROVIDER,
    OnnxRuntime,
    TorchCompile,
    TorchEager,
)
from workers.building.exports import export_onnx, export_torch
from workers.building.knobs.base import EngineImplementation, implements, pruning_of

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from autotune.core.contract import ArtifactInfo, TrialSpec
    from autotune.core.knobs.config import TrialConfig
    from workers.building.runtimes import Session
    from workers.building.variants import TorchVariant, Variant
    from workers.cache import LoadedWorkload


def require_cuda(what: str, devices: int = 1) -> None:
    import torch

    if not torch.cuda.is_available():
        raise Unsupported(f"{what} but no CUDA device is visible")
    if torch.cuda.device_count() < devices:
        raise Unsupported(
            f"{what} needs {devices} CUDA devices; {torch.cuda.device_count()} are visible"
        )


class TorchEngineImplementation(EngineImplementation):
    def export(
        self, loaded: LoadedWorkload, spec: TrialSpec, config: TrialConfig, directory: Path
    ) -> ArtifactInfo:
        from workers.building.variants import BuildContext
        from workers.loading.workloads import TorchModel

        assert isinstance(loaded.model, TorchModel)  # parse_config refuses torch_eager for ONNX
        context = BuildContext(sample_inputs=loaded.data.inputs[:1])
        pruned = pruning_of(config.prune_method).apply(loaded.original_variant(), config, context)
        return export_torch(torch_variant_of(pruned, self.name), loaded, spec, directory)

    def check_machine(self, config: TrialConfig) -> None:
        if config.device == "cuda":
            require_cuda("runtime.device=cuda")

    def session(self, variant: Variant, config: TrialConfig) -> Session:
        """One replica per CUDA device where the configuration asks for data parallelism,
        else this engine's own session."""
        from workers.building.sharding import DataParallelSession

        torch_variant = torch_variant_of(variant, self.name)
        if config.data_parallel > 1:
            return DataParallelSession(torch_variant, config, self.replica_forward(config))
        return self.single_session(torch_variant, config)

    def single_session(self, variant: TorchVariant, config: TrialConfig) -> Session:
        raise NotImplementedError

    def replica_forward(
        self, config: TrialConfig
    ) -> Callable[[torch.nn.Module], Callable[[torch.Tensor], Any]]:
        """How a data-parallel replica is made ready to call: as it is."""
        return lambda module: module


@implements
class TorchEagerImplementation(TorchEngineImplementation, TorchEager):
    def single_session(self, variant: TorchVariant, config: TrialConfig) -> Session:
        from workers.building.torch_kernels import kernels_for
        from workers.building.torch_sessions import TorchEagerSession

        return TorchEagerSession(
            variant,
            config.threads,
            device=config.device,
            kernels=kernels_for(config),
            cuda_graphs=config.cuda_graphs,
        )


@implements
class TorchCompileImplementation(TorchEngineImplementation, TorchCompile):
    def replica_forward(
        self, config: TrialConfig
    ) -> Callable[[torch.nn.Module], Callable[[torch.Tensor], Any]]:
        """Each replica compiled in the configuration's mode."""
        import torch

        from workers.building.torch_sessions import compile_module

        torch._dynamo.reset()
        mode = str(config.option(COMPILE_MODE.key))
        return lambda module: compile_module(module, mode)

    def single_session(self, variant: TorchVariant, config: TrialConfig) -> Session:
        from workers.building.torch_kernels import kernels_for
        from workers.building.torch_sessions import TorchCompileSession

        return TorchCompileSession(
            variant,
            config.threads,
            device=config.device,
            mode=str(config.option(COMPILE_MODE.key)),
            kernels=kernels_for(config),
        )


def torch_variant_of(variant: Variant, engine: str) -> TorchVariant:
    from workers.building.variants import TorchVariant

    if not isinstance(variant, TorchVariant):
        raise Unsupported(f"runtime.engine={engine} runs torch models only")
    return variant


class OnnxEngineImplementation(EngineImplementation):
    def export(
        self, loaded: LoadedWorkload, spec: TrialSpec, config: TrialConfig, directory: Path
    ) -> ArtifactInfo:
        return export_onnx(loaded, spec, config, directory)


@implements
class OnnxRuntimeImplementation(OnnxEngineImplementation, OnnxRuntime):
    def check_machine(self, config: TrialConfig) -> None:
        from workers.building.ort_session import require_provider

        require_provider(str(config.option(ORT_PROVIDER.key)))

    def session(self, variant: Variant, config: TrialConfig) -> Session:
        from workers.building.ort_session import OnnxRuntimeSession

        return OnnxRuntimeSession(
            onnx_bytes_of(variant, self.name),
            config.threads,
            str(config.option(ORT_PROVIDER.key)),
            str(config.option(ORT_GRAPH_OPT.key)),
            provider_settings=config.options,
        )


def onnx_bytes_of(variant: Variant, engine: str) -> bytes:
    from workers.building.variants import OnnxVariant

    if not isinstance(variant, OnnxVariant):
        raise Unsupported(f"runtime.engine={engine} needs an ONNX variant")
    return variant.model_bytes
