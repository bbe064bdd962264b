"""Probe the hardware at hand into a HardwareProfile, and derive the capabilities that
search-space dimensions require. The probe never fails for lack of a GPU or NVML: it
reports what is absent."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, ValidationError

from autotune.contract import Strict
from autotune.errors import RequestError

# CPU flags that change which kernels are fast; the rest of /proc/cpuinfo is noise here.
_RELEVANT_CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
)


class GpuInfo(Strict):
    name: str
    compute_capability: tuple[int, int]
    memory_mb: int
    power_limit_w: float | None = None


class HardwareProfile(Strict):
    hostname: str
    cpu_model: str
    cpu_cores: int = Field(ge=1)
    memory_mb: int = Field(ge=1)
    cpu_flags: list[str]
    gpus: list[GpuInfo] = []
    onnxruntime_providers: list[str] = []
    torch_version: str | None = None
    cuda_version: str | None = None
    notes: list[str] = Field(default=[], description="what the probe could not see, and why")

    @property
    def fingerprint(self) -> str:
        """A stable hash of what affects performance (not the hostname or versions)."""
        relevant = {
            "cpu_model": self.cpu_model,
            "cpu_cores": self.cpu_cores,
            "memory_gb": round(self.memory_mb / 1024),
            "cpu_flags": sorted(self.cpu_flags),
            "gpus": [g.model_dump() for g in self.gpus],
            "providers": sorted(self.onnxruntime_providers),
        }
        blob = json.dumps(relevant, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def capabilities(self) -> set[str]:
        return {name for name, has in CAPABILITIES.items() if has(self)}


def _min_cc(major: int, minor: int) -> Callable[[HardwareProfile], bool]:
    return lambda p: bool(p.gpus) and all(g.compute_capability >= (major, minor) for g in p.gpus)


def _any_flag(*flags: str) -> Callable[[HardwareProfile], bool]:
    return lambda p: any(f in p.cpu_flags for f in flags)


def _provider(name: str) -> Callable[[HardwareProfile], bool]:
    return lambda p: name in p.onnxruntime_providers


# Every capability a search space may require, and how a profile shows it.
CAPABILITIES: dict[str, Callable[[HardwareProfile], bool]] = {
    "cpu": lambda p: True,
    "cpu.avx2": _any_flag("avx2"),
    "cpu.avx512": _any_flag("avx512f"),
    "cpu.vnni": _any_flag("avx512_vnni", "avx_vnni", "amx_int8"),
    "cpu.bf16": _any_flag("avx512_bf16", "amx_bf16"),
    "cpu.amx": _any_flag("amx_tile"),
    "cuda": lambda p: bool(p.gpus),
    "cuda.bf16": _min_cc(8, 0),
    "cuda.fp8": _min_cc(8, 9),
    "multi_gpu": lambda p: len(p.gpus) >= 2,
    "ort.cpu": _provider("CPUExecutionProvider"),
    "ort.cuda": _provider("CUDAExecutionProvider"),
    "ort.tensorrt": _provider("TensorrtExecutionProvider"),
}


def probe() -> HardwareProfile:
    notes: list[str] = []
    gpus, cuda_version = _probe_gpus(notes)
    return HardwareProfile(
        hostname=platform.node(),
        cpu_model=_cpu_model(),
        cpu_cores=len(os.sched_getaffinity(0)),
        memory_mb=_memory_mb(),
        cpu_flags=_cpu_flags(),
        gpus=gpus,
        onnxruntime_providers=_ort_providers(notes),
        torch_version=_torch_version(notes),
        cuda_version=cuda_version,
        notes=notes,
    )


def load_profile(path: str | Path) -> HardwareProfile:
    path = Path(path)
    try:
        return HardwareProfile.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise RequestError("hardware", "must be an existing profile JSON file", str(path)) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "hardware." + ".".join(str(p) for p in first["loc"])
        raise RequestError(field, first["msg"], first.get("input")) from None


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    for line in _cpuinfo().splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return [f for f in _RELEVANT_CPU_FLAGS if f in present]
    return []


def _memory_mb() -> int:
    import psutil

    return int(psutil.virtual_memory().total / 2**20)


def _ort_providers(notes: list[str]) -> list[str]:
    try:
        import onnxruntime
    except ImportError:
        notes.append("onnxruntime is not installed: no ONNX Runtime providers")
        return []
    return list(onnxruntime.get_available_providers())


def _torch_version(notes: list[str]) -> str | None:
    try:
        import torch
    except ImportError:
        notes.append("torch is not installed")
        return None
    return str(torch.__version__)


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
        gpus = [_gpu_info(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return gpus, f"{cuda // 1000}.{cuda % 1000 // 10}"
    finally:
        pynvml.nvmlShutdown()


def _gpu_info(pynvml: object, index: int) -> GpuInfo:
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
    )
