"""Probe the hardware at hand into a HardwareProfile, and derive the capabilities that
search-space dimensions require. The probe never fails for lack of a GPU or NVML: it
reports what is absent."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    nvlink_peers: list[int] = Field(default=[], description="indices of GPUs linked by NVLink")


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
    cudnn_version: int | None = None
    torch_compile: bool = Field(
        default=False,
        description="torch.compile can build kernels here (inductor needs a C++ "
        "compiler on CPU, Triton on GPU)",
    )
    engines: list[str] = Field(
        default=[], description="capabilities the installed engines offer (their own probes)"
    )
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
        return {name for name, has in CAPABILITIES.items() if has(self)} | set(self.engines)


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
    "cuda.sparse24": _min_cc(8, 0),
    "multi_gpu": lambda p: len(p.gpus) >= 2,
    "torch.compile": lambda p: p.torch_compile,
    "sdpa.flash": _min_cc(8, 0),
    "sdpa.efficient": _min_cc(5, 0),
    "sdpa.cudnn": lambda p: _min_cc(8, 0)(p) and (p.cudnn_version or 0) >= 90000,
    "ort.cpu": _provider("CPUExecutionProvider"),
    "ort.cuda": _provider("CUDAExecutionProvider"),
    "ort.tensorrt": _provider("TensorrtExecutionProvider"),
}


def probe() -> HardwareProfile:
    notes: list[str] = []
    gpus, cuda_version = _probe_gpus(notes)
    torch_version, cudnn_version, compiles = _probe_torch(notes, bool(gpus))
    return HardwareProfile(
        hostname=platform.node(),
        cpu_model=_cpu_model(),
        cpu_cores=len(os.sched_getaffinity(0)),
        memory_mb=_memory_mb(),
        cpu_flags=_cpu_flags(),
        gpus=gpus,
        onnxruntime_providers=_ort_providers(notes),
        engines=_engine_capabilities(),
        torch_version=torch_version,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        torch_compile=compiles,
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


def _engine_capabilities() -> list[str]:
    from workers.knobs import ENGINES

    return sorted({cap for engine in ENGINES.values() for cap in engine.probe()})


def _ort_providers(notes: list[str]) -> list[str]:
    try:
        import onnxruntime
    except ImportError:
        notes.append("onnxruntime is not installed: no ONNX Runtime providers")
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
