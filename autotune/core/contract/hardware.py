"""The hardware: probed by the data plane on each node that runs trials (`workers.building.probe`),
read by the control plane to gate a space and to keep timings of unlike nodes apart."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable

from pydantic import Field

from autotune.core.contract.refs import Strict

# What a hardware fingerprint looks like (`HardwareProfile.fingerprint`).
FINGERPRINT = re.compile(r"[0-9a-f]{16}")


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
    missing_modules: list[str] = Field(
        default=[],
        description="modules the declared knobs need (their `Package`) that are not installed "
        "here; what the engines can run already says what they cost, so the fingerprint "
        "leaves them out",
    )
    notes: list[str] = Field(default=[], description="what the probe could not see, and why")

    @property
    def fingerprint(self) -> str:
        """A stable hash of what affects performance or what can run (not the hostname or
        versions): nodes with the same fingerprint are one kind."""
        relevant = {
            "cpu_model": self.cpu_model,
            "cpu_cores": self.cpu_cores,
            "memory_gb": round(self.memory_mb / 1024),
            "cpu_flags": sorted(self.cpu_flags),
            "gpus": [g.model_dump() for g in self.gpus],
            "providers": sorted(self.onnxruntime_providers),
            # What the node can run gates its space as much as what it is made of.
            "engines": sorted(self.engines),
            "torch_compile": self.torch_compile,
        }
        blob = json.dumps(relevant, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def capabilities(self) -> set[str]:
        """What the device offers (`CAPABILITIES`) and what the engines offer on it: those
        their probes reported (`engines`) and those each registered engine reads off this
        profile (`Engine.offered`)."""
        from autotune.core.knobs import ENGINES

        offered = {capability for e in ENGINES.values() for capability in e.offered(self)}
        device = {name for name, has in CAPABILITIES.items() if has(self)}
        return device | set(self.engines) | offered


def _min_cc(major: int, minor: int) -> Callable[[HardwareProfile], bool]:
    return lambda p: bool(p.gpus) and all(g.compute_capability >= (major, minor) for g in p.gpus)


def _any_flag(*flags: str) -> Callable[[HardwareProfile], bool]:
    return lambda p: any(f in p.cpu_flags for f in flags)


# What the device offers whatever runs on it, and how a profile shows it; an engine's own
# capabilities are its declaration's (`Engine.provides`, `Engine.offered`).
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
    "sdpa.flash": _min_cc(8, 0),
    "sdpa.efficient": _min_cc(5, 0),
    "sdpa.cudnn": lambda p: _min_cc(8, 0)(p) and (p.cudnn_version or 0) >= 90000,
}


class NodeInfo(Strict):
    """One node that holds trial slots, as the executor placed them."""

    node_id: str = Field(description="Ray's node id ('local' for this machine's process)")
    hostname: str
    labels: dict[str, str] = Field(default_factory=dict, description="the node's Ray labels")
    cpus: int = Field(ge=0, description="CPUs the node offers to trials")
    gpus: int = Field(ge=0, description="GPUs the node offers to trials")
    slots: int = Field(ge=0, description="trial slots placed on the node")


class NodeKind(Strict):
    """Nodes whose hardware is alike (one fingerprint): one space, one study, one tuned
    configuration. Timings of different kinds never meet."""

    profile: HardwareProfile
    nodes: list[NodeInfo] = Field(min_length=1)

    @classmethod
    def one_node(cls, profile: HardwareProfile, node_id: str, slots: int = 1) -> NodeKind:
        """A machine on its own: one node offering all its cores and GPUs to `slots` slots."""
        node = NodeInfo(
            node_id=node_id,
            hostname=profile.hostname,
            cpus=profile.cpu_cores,
            gpus=len(profile.gpus),
            slots=slots,
        )
        return cls(profile=profile, nodes=[node])

    @property
    def fingerprint(self) -> str:
        return self.profile.fingerprint

    @property
    def slots(self) -> int:
        return sum(node.slots for node in self.nodes)

    @property
    def cpus_per_slot(self) -> int:
        """The cores of the smallest slot of the kind (a node's CPUs as Ray offers them, at
        most the cores its processes may run on): a thread count above it would share."""
        cores = self.profile.cpu_cores
        shares = [min(node.cpus, cores) // node.slots for node in self.nodes if node.slots]
        return max(1, min(shares, default=cores))
