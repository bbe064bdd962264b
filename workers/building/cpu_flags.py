"""This CPU's flags, as /proc/cpuinfo gives them: those that change which kernels are fast
(the hardware profile's `cpu_flags`), and what they say of its int8 kernels."""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

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


def cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError as error:
        logger.info("no CPU flags or model name: /proc/cpuinfo is not readable (%s)", error)
        return ""


def cpu_flags() -> list[str]:
    for line in cpuinfo().splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return [f for f in _RELEVANT_CPU_FLAGS if f in present]
    return []


# x86 instructions that add int8 products in 32 bits; without them ONNX Runtime's int8 kernels
# (u8s8: AVX2's vpmaddubsw) add two products in 16 bits first, which 8-bit weights can saturate.
_INT8_WIDE_SUMS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def int8_sums_saturate() -> bool:
    """Whether this CPU's int8 kernels can saturate their 16-bit sums: AVX2 or AVX-512 without
    VNNI (ONNX Runtime's quantization guide: quantize with reduce_range, 7-bit weights)."""
    flags = set(cpu_flags())
    return bool(flags & {"avx2", "avx512f"}) and not flags & _INT8_WIDE_SUMS
