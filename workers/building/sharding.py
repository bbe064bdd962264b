"""Sharding: tensor parallelism over worker processes, data parallelism over CUDA devices.

Tensor parallel (`shard.tensor_parallel = k > 1`, torch_eager). The plan
(`workers.building.sharding_plan`) splits pairs of Linear layers across the ranks and replicates
every other layer. A `TensorParallelSession` starts k worker processes
(`python -m workers.building.tensor_parallel_rank`) when it is built. Each rebuilds the variant
itself from the model's entry point (`ModelSource`), joins a process group through a TCP store the
session hosts on a free localhost port, and applies the plan. `run(batch)` sends the batch to
every rank over a pipe and returns rank 0's outputs, so a timed call covers the sharded forward
with its all-reduces plus the pipe transfers in and out (rank 0's own forward time is kept in
`rank0_seconds`). The workers stop on `close()`, at garbage collection or interpreter exit, and
by themselves when the session's process goes away.

Data parallel (`shard.data_parallel = r > 1`, torch_eager and torch_compile, CUDA only): one
replica per CUDA device in this process; each call splits the batch into r chunks, moves each to
its device, launches every replica before reading any output back (the devices overlap), and
concatenates the outputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from autotune.core.knobs import ENGINES
from autotune.core.knobs.config import TrialConfig
from workers.building.sharding_plan import plan_pairs, sample_inputs
from workers.building.torch_io import (
    ReadsTorchOutputs,
    TorchOutputs,
    module_device,
    module_on,
    structure_of_text,
    torch_inputs,
)
from workers.building.torch_kernels import check_attention_used, kernels_for, sdpa_unsupported
from workers.building.variants import BuildContext, TorchVariant, Variant

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ModelSource:
    """What a fresh process needs to rebuild a workload's torch variant: the model's entry point
    and Python path, the hash of the weights it must return, and the transforms' context."""

    entry_point: str
    python_path: tuple[str, ...]
    sha256: str
    context: BuildContext


# ---------------------------------------------------------------------------------------------
# Tensor parallel: the session (parent side)

START_TIMEOUT_S = 300.0
CALL_TIMEOUT_S = 600.0
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    """What the session sends each rank (`workers.building.tensor_parallel_rank`) before anything
    else."""

    source: ModelSource
    config: TrialConfig
    pairs: tuple[tuple[str, str], ...]
    store_port: int
    threads: int
    timeout_s: float


def tensor_parallel_session(
    variant: Variant, config: TrialConfig, source: ModelSource | None
) -> TensorParallelSession:
    key = f"shard.tensor_parallel={config.tensor_parallel}"
    if "tensor_parallel" not in ENGINES[config.engine].applies:
        raise Unsupported(f"{key}: runtime.engine={config.engine} does not shard")
    if not isinstance(variant, TorchVariant):
        raise Unsupported(f"{key} shards torch models only")
    if source is None:
        raise Unsupported(
            f"{key}: the ranks rebuild the model from its Python entry point; none was given"
        )
    pairs = plan_pairs(
        variant.module, sample_inputs(variant, source.context), config.tensor_parallel
    )
    # The ranks rebuild a torch variant: calibration inputs only for static int8 (the source
    # carries no ranking: `LoadedWorkload.model_source`).
    if config.precision != "int8_static":
        context = dataclasses.replace(source.context, calibration_inputs=None)
        source = dataclasses.replace(source, context=context)
    return TensorParallelSession(source, config, pairs, variant)


def rank_threads(config: TrialConfig) -> int:
    """The trial's CPU threads are shared out between the ranks (at least one each)."""
    return max(1, config.threads // config.tensor_parallel)


class TensorParallelSession:
    """`config.tensor_parallel` worker processes holding one shard each; see the module
    docstring. Close it (or use it as a context manager) to stop the workers. Rank 0 says how
    its outputs nest and which it left out of judging with each answer (`output_structure`,
    `outputs_left_out`)."""

    def __init__(
        self,
        source: ModelSource,
        config: TrialConfig,
        pairs: Sequence[tuple[str, str]],
        variant: TorchVariant | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        import torch.distributed as dist

        self.world_size = config.tensor_parallel
        self.fixed_batch = source.context.fixed_batch
        self.outputs_left_out: dict[str, str] = {}
        self._nesting: tuple[str | None, Any] = (None, None)  # rank 0's text, and it read
        self.pairs: list[tuple[str, str]] = [(first, second) for first, second in pairs]
        self.threads = rank_threads(config)
        self.call_timeout_s = call_timeout_s
        self.rank0_seconds: list[float] = []
        self.shard_shapes: list[dict[str, list[int]]] = [{} for _ in range(self.world_size)]
        # A parent-side copy of the variant, for the one-off SDPA check (not for running).
        self._variant = variant if config.sdpa_backend != "auto" else None
        self._sdpa_backend = config.sdpa_backend
        self._store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False,
            timeout=timedelta(seconds=start_timeout_s),
        )  # fmt: skip
        self._processes: list[subprocess.Popen[bytes]] = []
        self._conns: list[Connection] = []
        self._logs: list[IO[bytes]] = []
        self._grace = [STOP_GRACE_S]
        self._finalizer = weakref.finalize(
            self, _stop_workers, self._processes, self._conns, self._logs, self._grace,
            self._store,
        )  # fmt: skip
        spec = WorkerSpec(
            source, config, tuple(self.pairs), self._store.port, self.threads, call_timeout_s
        )
        try:
            self._start(spec)
            self._await_ready(start_timeout_s)
        except BaseException:
            self._abort()
            raise

    @property
    def helper_pids(self) -> tuple[int, ...]:
        return tuple(process.pid for process in self._processes)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _start(self, spec: WorkerSpec) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env["OMP_NUM_THREADS"] = str(spec.threads)
        for rank in range(self.world_size):
            parent_end, child_end = multiprocessing.Pipe(duplex=True)
            log = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the workers)
            self._logs.append(log)
            self._conns.append(parent_end)
            command = [
                sys.executable, "-m", "workers.building.tensor_parallel_rank", "--rank", str(rank),
                "--world-size", str(self.world_size), "--fd", str(child_end.fileno()),
                "--parent", str(os.getpid()),
            ]  # fmt: skip
            try:
                self._processes.append(
                    subprocess.Popen(
                        command,
                        pass_fds=(child_end.fileno(),),
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )  # fmt: skip
                )
            finally:
                child_end.close()
            parent_end.send(spec)

    def _await_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(range(self.world_size))
        while pending:
            remaining = deadline - time.monotonic()
            ready = wait([self._conns[rank] for rank in pending], max(remaining, 0.0))
            if not ready:
                raise TimeoutError(
                    f"tensor-parallel ranks {sorted(pending)} were not ready after {timeout_s} s"
                )
            for conn in ready:
                rank = self._conns.index(conn)  # type: ignore[arg-type]
                message = self._receive(rank)
                if message[0] != "ready":
                    raise RuntimeError(f"tensor-parallel rank {rank} sent {message[0]!r} first")
                self.shard_shapes[rank] = message[1]
                pending.discard(rank)

    def run(self, batch: np.ndarray) -> np.ndarray:
        if self.closed:
            raise RuntimeError("the tensor-parallel session is closed")
        if self._variant is not None:
            import torch

            variant, self._variant = self._variant, None
            with torch.inference_mode():
                check_attention_used(
                    variant.module,
                    torch_inputs(batch, variant.input_dtype, module_device(variant.module)),
                    self._sdpa_backend,
                )
        try:
            array = np.ascontiguousarray(batch)
            for conn in self._conns:
                conn.send(array)
            return self._await_output()
        except BaseException:
            self._abort()
            raise

    def _await_output(self) -> np.ndarray:
        while True:
            ready = wait(self._conns, self.call_timeout_s)
            if not ready:
                raise TimeoutError(f"no tensor-parallel output after {self.call_timeout_s} s")
            for conn in ready:
                rank = self._conns.index(conn)  # type: ignore[arg-type]
                message = self._receive(rank)
                if rank == 0 and message[0] == "out":
                    self.rank0_seconds.append(message[2])
                    self._told_nesting(*message[3])
                    return message[1]  # type: ignore[no-any-return]
                raise RuntimeError(f"tensor-parallel rank {rank} sent {message[0]!r} unasked")

    def _told_nesting(self, text: str | None, left_out: dict[str, str]) -> None:
        self.outputs_left_out = left_out
        if text != self._nesting[0]:
            self._nesting = (text, None if text is None else structure_of_text(text))

    @property
    def output_structure(self) -> Any:
        """How rank 0's last outputs nest (None: a lone tensor)."""
        return self._nesting[1]

    def _receive(self, rank: int) -> tuple[Any, ...]:
        """The next message of `rank`; its error, or its death, raised here."""
        try:
            message = self._conns[rank].recv()
        except (EOFError, OSError) as error:
            raise RuntimeError(
                f"tensor-parallel rank {rank} died (exit code {self._exit_code(rank)}): "
                + self._log_tail(rank)
            ) from error
        if message[0] == "error":
            _, kind, text = message
            raise _remote_error(kind, f"tensor-parallel rank {rank}: {text}")
        return message  # type: ignore[no-any-return]

    def _exit_code(self, rank: int) -> int | None:
        try:
            return self._processes[rank].wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            return None

    def _log_tail(self, rank: int, chars: int = 2000) -> str:
        log = self._logs[rank]
        log.seek(0)
        return log.read().decode(errors="replace")[-chars:].strip() or "(no output)"

    def _abort(self) -> None:
        """Stop the workers without waiting: after a failure they may be stuck in a collective."""
        self._grace[0] = 0.0
        self.close()

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> TensorParallelSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _remote_error(kind: str, text: str) -> Exception:
    if kind == "unsupported":
        return Unsupported(text)
    if kind == "oom":
        return MemoryError(text)
    return RuntimeError(text)


def _stop_workers(
    processes: list[subprocess.Popen[bytes]],
    conns: list[Connection],
    logs: list[IO[bytes]],
    grace: list[float],
    store: object,
) -> None:
    if grace[0] > 0:
        for conn in conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
    deadline = time.monotonic() + grace[0]
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for conn in conns:
        conn.close()
    for log in logs:
        log.close()
    del store


# ---------------------------------------------------------------------------------------------
# Data parallel (CUDA)


class DataParallelSession(ReadsTorchOutputs):
    """`config.data_parallel` replicas of the variant, replica i on cuda:i, each made ready to
    call by the engine (`prepare`: as it is, or compiled); each call splits the batch across
    them."""

    def __init__(
        self,
        variant: TorchVariant,
        config: TrialConfig,
        prepare: Callable[[torch.nn.Module], Callable[[torch.Tensor], Any]],
    ) -> None:
        import torch

        self.replicas = config.data_parallel
        self.fixed_batch = variant.fixed_batch
        self._outputs = TorchOutputs(variant.fixed_batch)
        self._devices = [torch.device("cuda", index) for index in range(self.replicas)]
        self._modules = [module_on(variant.module, device) for device in self._devices]
        self._input_dtype = variant.input_dtype
        self._kernels = kernels_for(config)
        self._forwards = [prepare(module) for module in self._modules]
        self._attention_unchecked = config.sdpa_backend != "auto"

    def run(self, batch: np.ndarray) -> np.ndarray:
        chunks = [chunk for chunk in np.array_split(batch, self.replicas) if len(chunk)]
        with self._kernels.applied():
            inputs = [
                torch_inputs(chunk, self._input_dtype, device)
                for chunk, device in zip(chunks, self._devices, strict=False)
            ]
            if self._attention_unchecked:
                check_attention_used(self._modules[0], inputs[0], self._kernels.sdpa_backend)
                self._attention_unchecked = False
            try:
                # Launch every replica before reading any output back, so the devices overlap.
                outputs = [forward(x) for forward, x in zip(self._forwards, inputs, strict=False)]
            except Exception as error:
                refused = sdpa_unsupported(error, self._kernels.sdpa_backend)
                if refused is not None:
                    raise refused from error
                raise
            return np.concatenate(
                [
                    self._outputs.numpy(output, len(chunk))
                    for output, chunk in zip(outputs, chunks, strict=True)
                ]
            )

    def close(self) -> None:
        self._forwards, self._modules = [], []
