"""The hardware as the control plane sees it: saved profiles, and the kinds of node an
executor reports (`Executor.inspect`), with the choice of the kinds a tuning targets. The
profiles themselves are probed by the data plane (`workers.building.probe`) on the nodes that run
the trials; nothing here looks at the machine it runs on."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from autotune.core.contract import HardwareProfile, NodeKind
from autotune.core.errors import RequestError


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


def select_kinds(kinds: list[NodeKind], target: str | None) -> list[NodeKind]:
    """The kinds a tuning runs on: all of them without a target; else the one the target
    names, by fingerprint, by a saved profile file (its fingerprint), or by a Ray node label
    (`key=value`) one of its nodes carries."""
    if target is None:
        return kinds
    fingerprint = _profile_fingerprint(target)
    chosen = [k for k in kinds if k.fingerprint in (target, fingerprint) or _labelled(k, target)]
    if not chosen:
        known = ", ".join(describe_kind(k) for k in kinds)
        rule = (
            "must name a kind of node that runs trials (a fingerprint, a saved profile or a "
            f"node label key=value); the kinds: {known}"
        )
        raise RequestError("target", rule, target)
    return chosen


def one_kind(kinds: list[NodeKind], target: str | None) -> NodeKind:
    """The one kind a target names, or the only kind there is; several kinds and no target
    are bad input (`target`), naming the kinds."""
    chosen = select_kinds(kinds, target)
    if len(chosen) > 1:
        known = "; ".join(describe_kind(k) for k in chosen)
        rule = f"must choose one kind of node where the trials' nodes are of several ({known})"
        raise RequestError("target", rule, target)
    return chosen[0]


def describe_kind(kind: NodeKind) -> str:
    """A kind in a few words: its fingerprint, hardware and nodes."""
    return f"{kind.fingerprint} ({describe_hardware(kind)})"


def describe_hardware(kind: NodeKind) -> str:
    """A kind's hardware and hosts in a few words: '2 cores, 8x NVIDIA H200; gpu-1, gpu-2'."""
    profile = kind.profile
    cores = f"{profile.cpu_cores} core{'s' if profile.cpu_cores != 1 else ''}"
    gpus = f", {len(profile.gpus)}x {profile.gpus[0].name}" if profile.gpus else ""
    hosts = ", ".join(node.hostname for node in kind.nodes)
    return f"{cores}{gpus}; {hosts}"


def _profile_fingerprint(target: str) -> str | None:
    if not target.endswith(".json") or not Path(target).is_file():
        return None
    return load_profile(target).fingerprint


def _labelled(kind: NodeKind, target: str) -> bool:
    key, equals, value = target.partition("=")
    return bool(equals) and any(node.labels.get(key) == value for node in kind.nodes)
