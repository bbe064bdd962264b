"""Trials run on Ray actors pinned to the cluster's slots, one trial at a time per actor, so each
device slot measures alone; gang trials (sharding) borrow several slots of one node."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.contract import (
    ArtifactInfo,
    HeadToHeadResult,
    HeadToHeadSpec,
    Inspection,
    NodeInfo,
    NodeKind,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.errors import AutotuneError
from autotune.execution.base import (
    NodeListener,
    require_idle_slot,
    require_nothing_pending,
    short_id,
)
from autotune.execution.in_process import InProcessExecutor
from autotune.execution.ray_cluster import RayCluster, Workers, node_capacity, on_node
from autotune.execution.ray_membership import Membership
from autotune.execution.ray_slots import (
    Running,
    Slot,
    failed_task,
    marked,
    shard_degree,
    split_cores,
    timed_out,
)
from autotune.requests.request import DEFAULT_NODE_WAIT_S
from autotune.space.hardware import one_kind

if TYPE_CHECKING:
    from workers.actor import TrialWorker


# Outcomes after which a worker process is replaced: its memory or device state may be
# poisoned, and a killed or hung process cannot measure the next trial.
RECYCLE_AFTER = frozenset({"oom", "timeout", "lost"})


# A call outside a trial (inspect, compare, export) whose worker died before it answered
# (killed by the OOM killer or Ray's memory monitor while starting) goes to a fresh worker,
# like a lost trial: at most this many times in all. A worker whose node left does not count.
LOST_CALL_ATTEMPTS = 3
# How often Ray's node table is read while the kind is short of its slots (a node may join).
NODE_POLL_S = 2.0


class RayExecutor:
    """One long-lived Ray actor per slot, on the nodes of one kind; each actor runs one trial
    at a time.

    The slots come from a `RayCluster` (given, or made here: without an address an in-process
    Ray is started on this machine and stopped on close; with one, the executor joins that
    cluster). Each slot's actor is placed on its node and asks for that node's CPUs and GPUs
    per slot. `target` chooses the kind where the cluster has several (`select_kinds`). A
    trial past its `timeout_s` is stopped by killing its actor; the slot gets a fresh actor,
    as it does after an out-of-memory outcome.

    Nodes come and go. A node that leaves takes its slots with it, and the trial that was
    running there runs once more, from the start, on the next free slot of the kind; a node
    of the kind that joins (or one that held no slot) takes over the slots that were lost.
    While no node of the kind is left, `wait_for_slots` waits up to `node_wait_s` for one.
    Listeners (`on_node_event`) hear of each node that leaves or joins.
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
        node_wait_s: float = DEFAULT_NODE_WAIT_S,
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
            Slot(node.node_id, node.cpus // node.slots, node.gpus // node.slots)
            for node in self.kind.nodes
            for _ in range(node.slots)
        ]
        self._actor_cls = ray.remote(_worker_class())
        self._memory_limit_mb = self.trial_memory_mb = memory_limit_mb
        # On this machine each slot gets its own cores, so neighbours do not disturb its
        # timings; a cluster's nodes' cores are Ray's to place.
        slots = len(self._slots)
        self._cores = split_cores(slots) if self._cluster.local else [None] * slots
        self._actors = [self._new_actor(slot) for slot in range(slots)]
        self._planned = slots  # the slots a joining node may make up for
        self._members = Membership(self._cluster, self.kind, node_wait_s)
        self._idle: list[Any] = list(self._actors)
        self._running: dict[Any, Running] = {}
        self._gangs: list[TrialSpec] = []  # sharded trials waiting for enough idle slots
        self._reruns: list[TrialSpec] = []  # trials whose node left, waiting for a slot
        self._interrupted: dict[int, str] = {}  # why each such trial stopped
        self._ready: list[TrialResult] = []
        self._blobs: dict[str, Any] = {}

    def _new_actor(self, slot: int) -> Any:
        place = self._slots[slot]
        return self._actor_cls.options(
            num_cpus=place.cpus, num_gpus=place.gpus, scheduling_strategy=on_node(place.node_id)
        ).remote(self._memory_limit_mb, self._cores[slot], place.node_id)

    @property
    def slots(self) -> int:
        """The slots on nodes that are still there."""
        return len(self._live_slots())

    def _live_slots(self) -> list[int]:
        gone = self._members.gone
        return [i for i, slot in enumerate(self._slots) if slot.node_id not in gone]

    def on_node_event(self, listener: NodeListener) -> None:
        self._members.listeners.append(listener)

    def kinds(self) -> list[NodeKind]:
        return [self.kind]

    def inspect(self, workload: Workload) -> Inspection:
        blobs = self._ship(workload)
        info = self._on_first_slot(lambda actor: actor.inspect.remote(workload, blobs))
        return Inspection(model=info, kinds=self.kinds())

    def pings(self) -> list[dict[str, Any]]:
        """Each live slot's worker process: pid, host, node and the cores it may run on."""
        actors = [self._actors[slot] for slot in self._live_slots()]
        pings: list[dict[str, Any]] = self._ray.get([a.ping.remote() for a in actors])
        return pings

    def _on_first_slot(self, call: Any, timeout_s: float | None = None) -> Any:
        """`call(actor)`'s answer from the first live slot's worker. A worker that died before
        it answered is replaced and asked again (on another node if its node left); an
        exception the call raised, or a timeout, is the caller's: an autotune error as itself
        (a RequestError stays bad input with its one-line message, not Ray's traceback)."""
        exceptions = self._ray.exceptions
        attempt = 1
        while True:
            self.wait_for_slots()
            slot = self._live_slots()[0]
            try:
                return self._ray.get(call(self._actors[slot]), timeout=timeout_s)
            except exceptions.RayTaskError as exc:
                if isinstance(exc.cause, AutotuneError):
                    raise exc.cause from None
                raise
            except exceptions.GetTimeoutError:
                raise
            except exceptions.RayError as exc:
                if not self._still_there(slot):
                    continue
                if attempt == LOST_CALL_ATTEMPTS:
                    first_line = (str(exc).splitlines() or [""])[0]
                    raise AutotuneError(
                        f"the worker died {attempt} times before it answered; "
                        f"last: {type(exc).__name__}: {first_line}"
                    ) from exc
                attempt += 1

    # -- nodes that leave and join -----------------------------------------------------------

    def _still_there(self, slot: int, trial: int | None = None) -> bool:
        """After the slot's worker died: a fresh worker for it where its node is still there
        (True); else the node's slots are gone, and listeners hear that it left."""
        node_id = self._slots[slot].node_id
        if node_id in self._members.gone:
            return False
        fresh = self._replace(slot)
        if self._members.answers(node_id, fresh.ping.remote()):
            return True
        self._node_left(node_id, trial)
        return False

    def _node_left(self, node_id: str, trial: int | None) -> None:
        before = self._nodes_alive()
        self._members.gone.add(node_id)
        for slot, place in enumerate(self._slots):
            if place.node_id == node_id:
                actor = self._actors[slot]
                if actor in self._idle:
                    self._idle.remove(actor)
                self._ray.kill(actor)
        self._members.tell("left", node_id, before, self._nodes_alive(), trial)

    def _nodes_alive(self) -> int:
        return len({self._slots[slot].node_id for slot in self._live_slots()})

    def _look_for_nodes(self) -> None:
        """Slots lost with nodes that left are taken over by alive nodes of the kind that have
        room (one that joined, or one that held no slot), up to the slots planned at start."""
        if self.slots >= self._planned:
            return
        used = {self._slots[slot].node_id for slot in self._live_slots()}
        for node in self._members.newcomers(used):
            if self.slots >= self._planned:
                return
            self._take_node(node)

    def _take_node(self, node: NodeInfo) -> None:
        before = self._nodes_alive()
        room = min(node_capacity(node, self._cluster.workers), self._planned - self.slots)
        self._members.nodes[node.node_id] = node.model_copy(update={"slots": room})
        for _ in range(room):
            self._slots.append(Slot(node.node_id, node.cpus // room, node.gpus // room))
            self._cores.append(None)
            actor = self._new_actor(len(self._slots) - 1)
            self._actors.append(actor)
            self._idle.append(actor)
        self._members.tell("joined", node.node_id, before, self._nodes_alive())
        self._start_reruns()

    def wait_for_slots(self, stop: threading.Event | None = None) -> None:
        deadline = time.monotonic() + self._members.node_wait_s
        while not self.slots:
            if stop is not None and stop.is_set():
                return
            if time.monotonic() >= deadline:
                raise self._members.none_came_back()
            self._look_for_nodes()
            if not self.slots:
                time.sleep(NODE_POLL_S)

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
        if self._needs_gang(spec):
            self._submit_gang(spec, shard_degree(spec))
            return
        require_idle_slot(len(self._idle))
        self._run(spec)

    def _needs_gang(self, spec: TrialSpec) -> bool:
        """More GPUs than a slot holds (on slots without GPUs the worker refuses it)."""
        most = max(slot.gpus for slot in self._slots)
        return bool(most) and shard_degree(spec) > most

    def _run(self, spec: TrialSpec) -> None:
        actor = self._idle.pop()
        ref = actor.run.remote(spec, self._ship(spec.workload))
        self._running[ref] = Running(actor, spec, time.monotonic())

    def pending(self) -> int:
        return len(self._running) + len(self._gangs) + len(self._reruns) + len(self._ready)

    def _start_reruns(self) -> None:
        """Trials whose node left, on the next idle slots (a gang trial waits for its gang)."""
        while self._reruns and self._idle:
            spec = self._reruns.pop(0)
            if self._needs_gang(spec):
                self._gangs.append(spec)
                self._start_gangs()
            else:
                self._run(spec)

    def _node_gpus(self, node_id: str) -> int:
        """The GPUs of all the slots on a node: the most a gang trial there can borrow."""
        return sum(
            self._slots[i].gpus for i in self._live_slots() if self._slots[i].node_id == node_id
        )

    def _submit_gang(self, spec: TrialSpec, degree: int) -> None:
        most = max((self._node_gpus(self._slots[i].node_id) for i in self._live_slots()), default=0)
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
        for actor in self._idle:  # the idle slots are on nodes that are still there
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
            borrowed = self._gang_slots(shard_degree(spec))
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
            self._running[ref] = Running(holder, spec, time.monotonic(), borrowed)

    def wait(self) -> list[TrialResult]:
        """Every finished trial, once at least one is. A trial whose node left runs again
        and is not among them; with no slot left to run it on, this returns nothing (the
        caller waits for slots)."""
        results: list[TrialResult] = self._ready
        self._ready = []
        while self._running and not results:
            now = time.monotonic()
            lefts = [r.seconds_left(now) for r in self._running.values()]
            if self.slots < self._planned:
                lefts.append(NODE_POLL_S)
            timeout = min((x for x in lefts if x is not None), default=None)
            ready, _ = self._ray.wait(list(self._running), num_returns=1, timeout=timeout)
            ready, _ = self._ray.wait(
                list(self._running), num_returns=len(self._running), timeout=0
            )
            for ref in ready:
                result = self._finish(ref, self._collect(ref))
                if result is not None:
                    results.append(result)
            now = time.monotonic()
            for ref in [ref for ref, r in self._running.items() if r.overdue(now)]:
                result = self._finish(ref, timed_out(self._running[ref].spec))
                if result is not None:
                    results.append(result)
            self._look_for_nodes()
        return results

    def _finish(self, ref: Any, result: TrialResult) -> TrialResult | None:
        """The slot back to idle (with a fresh worker where needed) and the result; None for
        a trial whose node left: it runs again, once, elsewhere."""
        running = self._running.pop(ref)
        spec = running.spec
        slot = self._slot_of(running)
        if result.status == "lost" and not self._still_there(slot, spec.trial_number):
            if running.borrowed_slots is not None:
                self._gang_ended(running)
            return self._interrupt(spec, self._slots[slot].node_id)
        if running.borrowed_slots is not None:
            self._gang_ended(running)
        else:
            actor = self._actors[slot]
            if result.status in RECYCLE_AFTER or result.device_fault:
                actor = self._replace(slot) if result.status != "lost" else actor
            self._idle.append(actor)
        self._start_reruns()
        return marked(result, self._interrupted.pop(spec.trial_number, None))

    def _slot_of(self, running: Running) -> int:
        if running.borrowed_slots is not None:
            return running.borrowed_slots[0]
        return self._actors.index(running.actor)

    def _interrupt(self, spec: TrialSpec, node_id: str) -> TrialResult | None:
        """A trial whose node left: queued to run again, or, the second time, lost."""
        reason = f"node {short_id(node_id)} left while it ran"
        if spec.trial_number in self._interrupted:
            lost = TrialResult.for_spec(spec, "lost", f"{reason}, the second time")
            return marked(lost, self._interrupted.pop(spec.trial_number))
        self._interrupted[spec.trial_number] = reason
        self._reruns.append(spec)
        self._start_reruns()
        return None

    def _gang_ended(self, running: Running) -> None:
        self._ray.kill(running.actor)
        for slot in running.borrowed_slots or []:
            if self._slots[slot].node_id in self._members.gone:
                continue
            self._ray.kill(self._actors[slot])  # stopped for the gang, or a node check's
            self._actors[slot] = self._new_actor(slot)
            self._idle.append(self._actors[slot])
        self._start_gangs()

    def _collect(self, ref: Any) -> TrialResult:
        spec = self._running[ref].spec
        try:
            result: TrialResult = self._ray.get(ref)
            return result
        except self._ray.exceptions.RayTaskError as exc:
            return failed_task(spec, "error", "worker raised", exc, str(exc.cause))
        except self._ray.exceptions.RayError as exc:
            return failed_task(spec, "lost", "worker died", exc, str(exc))

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


def _worker_class() -> type[TrialWorker]:
    from workers.actor import TrialWorker

    return TrialWorker
