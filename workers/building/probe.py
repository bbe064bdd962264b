"""What this node has: the hardware profile the control plane gates a space by, probed here,
in the data plane, on the node that runs the trials. The probe never fails for lack of a GPU
or NVML: it reports what is absent."""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import shutil
from typing import Any

from autotune.core.contract import GpuInfo, HardwareProfile
from workers.building.cpu_flags import cpu_flags, cpuinfo

logger = logging.getLogger(__name__)


def probe() -> HardwareProfile:
    notes: list[str] = []
    gpus, cuda_version = _probe_gpus(notes)
    torch_version, cudnn_version, compiles = _probe_torch(notes, bool(gpus))
    return HardwareProfile(
        hostname=platform.node(),
        cpu_model=_cpu_model(),
        cpu_cores=len(os.sched_getaffinity(0)),
        memory_mb=_memory_mb(),
        cpu_flags=cpu_flags(),
        gpus=gpus,
        onnxruntime_providers=_ort_providers(notes),
        engines=_engine_capabilities(notes),
        missing_modules=missing_modules(),
        torch_version=torch_version,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        torch_compile=compiles,
        notes=notes,
    )


def _cpu_model() -> str:
    for line in cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_mb() -> int:
    import psutil

    return int(psutil.virtual_memory().total / 2**20)


def _engine_capabilities(notes: list[str]) -> list[str]:
    """What the engines whose software imports here offer (an engine whose package is
    missing, hidden or broken offers nothing, so its dimensions leave this node's space)."""
    from workers.building.knobs.base import ENGINE_IMPLEMENTATIONS

    capabilities: set[str] = set()
    for engine in ENGINE_IMPLEMENTATIONS.values():
        try:
            capabilities |= engine.probe()
        except Exception as error:  # a broken install raises what its own code raises
            notes.append(f"runtime.engine={engine.name} is not usable here ({error})")
    return sorted(capabilities)


def missing_modules() -> list[str]:
    """The modules the declared knobs need (`Knob.package`) that are not installed here (or
    are hidden from this process)."""
    from autotune.core.knobs import all_knobs

    needed = {knob.package.module for knob in all_knobs() if knob.package is not None}
    return sorted(module for module in needed if not _installed(module))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # missing, or hidden from this process by an import hook
        return False


def _ort_providers(notes: list[str]) -> list[str]:
    try:
        import onnxruntime
    except Exception as error:  # missing, hidden or broken: no providers either way
        notes.append(f"onnxruntime does not import here ({error}): no ONNX Runtime providers")
        return []
    return list(onnxruntime.get_available_providers())


def _probe_torch(notes: list[str], has_gpus: bool) -> tuple[str | None, int | None, bool]:
    try:
        import torch
    except ImportError:
        notes.append("torch is not installed")
        return None, None, False
    cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    if has_gpus:
        compiles = importlib.util.find_spec("triton") is not None
    else:
        compiles = any(shutil.which(cc) for cc in ("c++", "g++", "clang++"))
    if not compiles:
        notes.append("torch.compile cannot build kernels here (no C++ compiler or Triton)")
    return str(torch.__version__), cudnn, compiles


def _probe_gpus(notes: list[str]) -> tuple[list[GpuInfo], str | None]:
    try:
        import pynvml
    except ImportError:
        notes.append("nvidia-ml-py is not installed: NVIDIA GPUs not probed")
        return [], None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        notes.append(f"NVML unavailable ({exc}): no NVIDIA GPUs seen")
        return [], None
    try:
        count = pynvml.nvmlDeviceGetCount()
        gpus = [_gpu_info(pynvml, i, count) for i in range(count)]
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return gpus, f"{cuda // 1000}.{cuda % 1000 // 10}"
    finally:
        pynvml.nvmlShutdown()


def _gpu_info(pynvml: object, index: int, count: int) -> GpuInfo:
    nv = pynvml
    handle = nv.nvmlDeviceGetHandleByIndex(index)  # type: ignore[attr-defined]
    name = nv.nvmlDeviceGetName(handle)  # type: ignore[attr-defined]
    major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)  # type: ignore[attr-defined]
    memory = nv.nvmlDeviceGetMemoryInfo(handle).total  # type: ignore[attr-defined]
    try:
        limit_w = nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000  # type: ignore[attr-defined]
    except nv.NVMLError:  # type: ignore[attr-defined]
        limit_w = None
    return GpuInfo(
        name=name if isinstance(name, str) else name.decode(),
        compute_capability=(major, minor),
        memory_mb=int(memory / 2**20),
        power_limit_w=limit_w,
        nvlink_peers=_nvlink_peers(nv, handle, index, count),
    )


def _nvlink_peers(nv: Any, handle: Any, index: int, count: int) -> list[int]:
    peers = []
    for other in range(count):
        if other == index:
            continue
        other_handle = nv.nvmlDeviceGetHandleByIndex(other)
        try:
            status = nv.nvmlDeviceGetP2PStatus(handle, other_handle, nv.NVML_P2P_CAPS_INDEX_NVLINK)
        except nv.NVMLError:
            continue
        if status == nv.NVML_P2P_STATUS_OK:
            peers.append(other)
    return peers
