"""Trials run on Ray actors pinned to the cluster's slots, one trial at a time per actor, so each
device slot measures alone; gang trials (sharding) borrow several slots of one node."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.contract import (
    ArtifactInfo,
    HeadToHeadResult,
    HeadToHeadSpec,
    Inspection,
    NodeKind,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.errors import AutotuneError
from autotune.execution.base import (
    require_idle_slot,
    require_nothing_pending,
)
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_cluster import RayCluster, Workers, on_node
from autotune.space.hardware import one_kind

if TYPE_CHECKING:
    from workers.actor import TrialWorker


@dataclass(frozen=True)
class _Slot:
    """Where a slot's actor lives and what it asks of its node."""

    node_id: str
    cpus: int
    gpus: int


@dataclass
class _Running:
    actor: Any
    spec: TrialSpec
    started: float
    borrowed_slots: list[int] | None = None  # a gang trial's slots, given back when it ends

    def overdue(self, now: float) -> bool:
        return self.spec.timeout_s is not None and now - self.started > self.spec.timeout_s

    def seconds_left(self, now: float) -> float | None:
        if self.spec.timeout_s is None:
            return None
        return max(0.0, self.started + self.spec.timeout_s - now)


# Outcomes after which a worker process is replaced: its memory or device state may be
# poisoned, and a killed or hung process cannot measure the next trial.
RECYCLE_AFTER = frozenset({"oom", "timeout", "lost"})


# A call outside a trial (inspect, compare, export) whose worker died before it answered
# (killed by the OOM killer or Ray's memory monitor while starting, its node lost) goes to
# a fresh worker, like a lost trial: at most this many times in all.
LOST_CALL_ATTEMPTS = 3


class RayExecutor:
    """One long-lived Ray actor per slot, on the nodes of one kind; each actor runs one trial
    at a time.

    The slots come from a `RayCluster` (given, or made here: without an address an in-process
    Ray is started on this machine and stopped on close; with one, the executor joins that
    cluster). Each slot's actor is placed on its node and asks for that node's CPUs and GPUs
    per slot. `target` chooses the kind where the cluster has several (`select_kinds`). A
    trial past its `timeout_s` is stopped by killing its actor; the slot gets a fresh actor,
    as it does after an out-of-memory outcome.
    """

    runs_in_process = False

    def __init__(
        self,
        workers: Workers = 1,
        address: str | None = None,
        memory_limit_mb: int | None = None,
        num_gpus: int | None = None,
        target: str | None = None,
        cluster: RayCluster | None = None,
    ) -> None:
        self._cluster = cluster or RayCluster(address, workers, num_gpus)
        self._cluster.acquire()
        self._ray = ray = self._cluster.ray
        self._actors: list[Any] = []
        self._closed = False
        try:
            self.kind = one_kind(self._cluster.kinds, target)
        except BaseException:
            self.close()
            raise
        self._slots = [
            _Slot(node.node_id, node.cpus // node.slots, node.gpus // node.slots)
            for node in self.kind.nodes
            for _ in range(node.slots)
        ]
        self._actor_cls = ray.remote(_worker_class())
        self._memory_limit_mb = self.trial_memory_mb = memory_limit_mb
        # On this machine each slot gets its own cores, so neighbours do not disturb its
        # timings; a cluster's nodes' cores are Ray's to place.
        slots = len(self._slots)
        self._cores = _split_cores(slots) if self._cluster.local else [None] * slots
        self._actors = [self._new_actor(slot) for slot in range(slots)]
        self._idle: list[Any] = list(self._actors)
        self._running: dict[Any, _Running] = {}
        self._gangs: list[TrialSpec] = []  # sharded trials waiting for enough idle slots
        self._ready: list[TrialResult] = []
        self._blobs: dict[str, Any] = {}

    def _new_actor(self, slot: int) -> Any:
        place = self._slots[slot]
        return self._actor_cls.options(
            num_cpus=place.cpus, num_gpus=place.gpus, scheduling_strategy=on_node(place.node_id)
        ).remote(self._memory_limit_mb, self._cores[slot], place.node_id)

    @property
    def slots(self) -> int:
        return len(self._actors)

    def kinds(self) -> list[NodeKind]:
        return [self.kind]

    def inspect(self, workload: Workload) -> Inspection:
        blobs = self._ship(workload)
        info = self._on_first_slot(lambda actor: actor.inspect.remote(workload, blobs))
        return Inspection(model=info, kinds=self.kinds())

    def pings(self) -> list[dict[str, Any]]:
        """Each slot's worker process: pid, host, node and the cores it may run on."""
        pings: list[dict[str, Any]] = self._ray.get([a.ping.remote() for a in self._actors])
        return pings

    def _on_first_slot(self, call: Any, timeout_s: float | None = None) -> Any:
        """`call(actor)`'s answer from the first slot's worker. A worker that died before it
        answered is replaced and asked again; an exception the call raised, or a timeout,
        is the caller's: an autotune error as itself (a RequestError stays bad input with
        its one-line message, not Ray's traceback)."""
        exceptions = self._ray.exceptions
        attempt = 1
        while True:
            try:
                return self._ray.get(call(self._actors[0]), timeout=timeout_s)
            except exceptions.RayTaskError as exc:
                if isinstance(exc.cause, AutotuneError):
                    raise exc.cause from None
                raise
            except exceptions.GetTimeoutError:
                raise
            except exceptions.RayError as exc:
                if attempt == LOST_CALL_ATTEMPTS:
                    first_line = (str(exc).splitlines() or [""])[0]
                    raise AutotuneError(
                        f"the worker died {attempt} times before it answered; "
                        f"last: {type(exc).__name__}: {first_line}"
                    ) from exc
                self._replace(0)
                attempt += 1

    def _replace(self, slot: int) -> Any:
        """A fresh worker for the slot (the old one is stopped); idle if the old one was."""
        old = self._actors[slot]
        self._ray.kill(old)
        fresh = self._new_actor(slot)
        self._actors[slot] = fresh
        if old in self._idle:
            self._idle[self._idle.index(old)] = fresh
        return fresh

    def submit(self, spec: TrialSpec) -> None:
        degree, most = _shard_degree(spec), max(slot.gpus for slot in self._slots)
        if most and degree > most:  # more GPUs than a slot holds (none: the worker refuses it)
            self._submit_gang(spec, degree)
            return
        require_idle_slot(len(self._idle))
        actor = self._idle.pop()
        ref = actor.run.remote(spec, self._ship(spec.workload))
        self._running[ref] = _Running(actor, spec, time.monotonic())

    def pending(self) -> int:
        return len(self._running) + len(self._gangs) + len(self._ready)

    def _node_gpus(self, node_id: str) -> int:
        """The GPUs of all the slots on a node: the most a gang trial there can borrow."""
        return sum(slot.gpus for slot in self._slots if slot.node_id == node_id)

    def _submit_gang(self, spec: TrialSpec, degree: int) -> None:
        most = max(self._node_gpus(slot.node_id) for slot in self._slots)
        if degree > most:
            reason = (
                f"needs {degree} GPUs on one node; the largest node of kind "
                f"{self.kind.fingerprint} has {most} in this executor's slots"
            )
            self._ready.append(TrialResult.for_spec(spec, "unsupported", reason))
            return
        self._gangs.append(spec)
        self._start_gangs()

    def _gang_slots(self, degree: int) -> list[int] | None:
        """Idle slots on one node whose GPUs together hold `degree`, or None while no node
        has enough of them idle: a sharded trial never spans nodes."""
        by_node: dict[str, list[int]] = {}
        for actor in self._idle:
            slot = self._actors.index(actor)
            by_node.setdefault(self._slots[slot].node_id, []).append(slot)
        for slots in by_node.values():
            gpus = self._slots[slots[0]].gpus
            needed = -(-degree // gpus) if gpus else len(slots) + 1
            if len(slots) >= needed:
                return slots[:needed]
        return None

    def _start_gangs(self) -> None:
        """Run a waiting gang trial once enough slots of one node are idle: their actors are
        stopped to free their GPUs, one actor on that node holding all of them runs the trial,
        and the slots get fresh actors when it ends."""
        while self._gangs:
            spec = self._gangs[0]
            borrowed = self._gang_slots(_shard_degree(spec))
            if borrowed is None:
                return
            self._gangs.pop(0)
            for slot in borrowed:
                actor = self._actors[slot]
                self._idle.remove(actor)
                self._ray.kill(actor)
            node_id = self._slots[borrowed[0]].node_id
            gpus = sum(self._slots[slot].gpus for slot in borrowed)
            cpus = sum(self._slots[slot].cpus for slot in borrowed)
            gang = self._actor_cls.options(
                num_cpus=cpus, num_gpus=gpus, scheduling_strategy=on_node(node_id)
            )
            holder: Any = gang.remote(self._memory_limit_mb, None, node_id)
            ref = holder.run.remote(spec, self._ship(spec.workload))
            self._running[ref] = _Running(holder, spec, time.monotonic(), borrowed)

    def wait(self) -> list[TrialResult]:
        results: list[TrialResult] = self._ready
        self._ready = []
        while self._running and not results:
            now = time.monotonic()
            lefts = [r.seconds_left(now) for r in self._running.values()]
            timeout = min((x for x in lefts if x is not None), default=None)
            ready, _ = self._ray.wait(list(self._running), num_returns=1, timeout=timeout)
            ready, _ = self._ray.wait(
                list(self._running), num_returns=len(self._running), timeout=0
            )
            for ref in ready:
                results.append(self._finish(ref, self._collect(ref)))
            now = time.monotonic()
            for ref in [ref for ref, r in self._running.items() if r.overdue(now)]:
                results.append(self._finish(ref, _timed_out(self._running[ref].spec)))
        return results

    def _finish(self, ref: Any, result: TrialResult) -> TrialResult:
        running = self._running.pop(ref)
        if running.borrowed_slots is not None:
            self._end_gang(running)
            return result
        actor = running.actor
        if result.status in RECYCLE_AFTER or result.device_fault:
            actor = self._replace(self._actors.index(actor))
        self._idle.append(actor)
        return result

    def _end_gang(self, running: _Running) -> None:
        self._ray.kill(running.actor)
        for slot in running.borrowed_slots or []:
            self._actors[slot] = self._new_actor(slot)
            self._idle.append(self._actors[slot])
        self._start_gangs()

    def _collect(self, ref: Any) -> TrialResult:
        spec = self._running[ref].spec
        try:
            result: TrialResult = self._ray.get(ref)
            return result
        except self._ray.exceptions.RayTaskError as exc:
            reason = f"worker raised: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            return TrialResult.for_spec(spec, "error", reason)
        except self._ray.exceptions.RayError as exc:
            reason = f"worker died: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            return TrialResult.for_spec(spec, "lost", reason)

    def compare(self, spec: HeadToHeadSpec) -> HeadToHeadResult:
        """On the first slot's actor; past `timeout_s` the actor is replaced and the
        comparison fails."""
        require_nothing_pending(self.pending())
        blobs = self._ship(spec.workload)
        try:
            result: HeadToHeadResult = self._on_first_slot(
                lambda actor: actor.compare.remote(spec, blobs), spec.timeout_s
            )
        except self._ray.exceptions.GetTimeoutError:
            self._replace(0)
            raise AutotuneError(
                f"the head-to-head comparison ran past {spec.timeout_s:g} s; its worker was stopped"
            ) from None
        return result

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        blobs = self._ship(spec.workload)
        artifact: ArtifactInfo = self._on_first_slot(
            lambda actor: actor.export.remote(spec, out_dir, blobs)
        )
        return artifact

    def _ship(self, workload: Workload) -> dict[str, Any]:
        """Put the workload's files into the object store, once each: a node that lacks a
        path fetches the bytes once, not once per trial."""
        from workers.loading.blobs import Blob, workload_files

        for path in workload_files(workload):
            if path not in self._blobs and Path(path).is_file():
                payload = Path(path).read_bytes()
                digest = hashlib.sha256(payload).hexdigest()
                self._blobs[path] = Blob(Path(path).name, digest, self._ray.put(payload))
        return {p: self._blobs[p] for p in workload_files(workload) if p in self._blobs}

    def close(self) -> None:
        # Once the cluster's own Ray is shut down, ray.kill on its actors would start a
        # fresh local Ray (left running) and fail to find them.
        if self._closed:
            return
        self._closed = True
        try:
            for actor in self._actors:
                self._ray.kill(actor)
        finally:
            self._cluster.release()


def survey_kinds(ray_address: str | None = None, workers: Workers = 1) -> list[NodeKind]:
    """The kinds of node trials would run on, without starting any: a Ray cluster's nodes
    (each probed on itself), or without an address this machine (where a local Ray would run
    them as well)."""
    if ray_address is None:
        return InProcessExecutor().kinds()
    cluster = RayCluster(ray_address, workers)
    try:
        return cluster.kinds
    finally:
        cluster.release()


def _split_cores(slots: int) -> list[list[int] | None]:
    """Disjoint, contiguous core sets, one per slot (shared when there are fewer cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < slots:
        return [None] * slots
    size = len(cores) // slots
    return [cores[i * size : (i + 1) * size] for i in range(slots)]


def _timed_out(spec: TrialSpec) -> TrialResult:
    reason = f"still running after {spec.timeout_s:g} s; its worker was stopped"
    return TrialResult.for_spec(spec, "timeout", reason, float(spec.timeout_s or 0.0))


def _worker_class() -> type[TrialWorker]:
    from workers.actor import TrialWorker

    return TrialWorker


def _shard_degree(spec: TrialSpec) -> int:
    return max(
        int(spec.config.get("shard.tensor_parallel", 1)),
        int(spec.config.get("shard.data_parallel", 1)),
    )
