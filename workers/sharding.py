"""Sharding: tensor parallelism over worker processes, data parallelism over CUDA devices.

Tensor parallel (`shard.tensor_parallel = k > 1`, torch_eager). The plan pairs Linear layers
where the first one's output flows, through elementwise ops only (activations, dropout), into
the second one and nowhere else (an MLP, a transformer's feed-forward block): the first is split
by output features (`ColwiseParallel`), the second by input features (`RowwiseParallel`, whose
partial results are summed by an all-reduce); every other layer is replicated. Pairs are found
by running the model once on sample inputs under a `TorchFunctionMode` that records which op
fed which, so Python control flow does not get in the way (torch.fx tracing would).

A `TensorParallelSession` starts k worker processes (`python -m workers.sharding`) when it is
built. Each rebuilds the variant itself from the model's entry point (the same transforms on the
same weights, checked by hash: modules are never pickled across processes), joins a process
group (gloo on the CPU, NCCL with one GPU per rank on CUDA) through a TCP store the session
hosts on a free localhost port, and applies the plan with `parallelize_module` over a 1-D
`DeviceMesh`. `run(batch)` sends the batch to every rank over a pipe and returns rank 0's
outputs, so a timed call covers the sharded forward with its all-reduces plus the pipe transfers
in and out (rank 0's own forward time is kept in `rank0_seconds`). The workers stop on
`close()`, at garbage collection or interpreter exit, and by themselves when the session's
process goes away (their pipe closes; a watchdog catches it even mid-collective).

Data parallel (`shard.data_parallel = r > 1`, torch_eager and torch_compile, CUDA only): one
replica per CUDA device in this process; each call splits the batch into r chunks, moves each to
its device, launches every replica before reading any output back (the devices overlap), and
concatenates the outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from autotune.errors import Unsupported
from workers.config import TrialConfig
from workers.runtimes import (
    check_attention_used,
    compile_module,
    first_tensor,
    kernels_for,
    module_on,
    sdpa_unsupported,
    to_numpy,
    torch_inputs,
)
from workers.variants import BuildContext, TorchVariant, Variant

if TYPE_CHECKING:
    import torch
    from torch.distributed.tensor.parallel import ParallelStyle


@dataclass(frozen=True)
class ModelSource:
    """What a fresh process needs to rebuild a workload's torch variant: the model's entry point
    and Python path, the hash of the weights it must return, and the transforms' context."""

    entry_point: str
    python_path: tuple[str, ...]
    sha256: str
    context: BuildContext


# ---------------------------------------------------------------------------------------------
# The plan

# Ops that act on each element alone (a shard of the features stays a shard), by the name
# torch function modes see them under (functional, torch.* and Tensor method forms).
ELEMENTWISE_OPS = frozenset(
    {
        "relu", "relu6", "gelu", "silu", "mish", "tanh", "sigmoid", "hardtanh",
        "hardswish", "hardsigmoid", "leaky_relu", "elu", "selu", "celu", "softplus",
        "logsigmoid", "dropout", "alpha_dropout", "feature_alpha_dropout", "identity",
        "contiguous", "clone", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "erf",
        # arithmetic counts when its only tensor operand is the chain's tensor (x * 0.5, x * x)
        "add", "radd", "sub", "rsub", "mul", "rmul", "div", "truediv", "rtruediv", "pow",
    }
)  # fmt: skip


@dataclass
class _Op:
    name: str  # without leading or trailing underscores: relu_ and __mul__ are relu and mul
    func: Any
    inputs: list[int]
    outputs: list[int]
    weight_id: int | None = None  # for F.linear: the weight's id


def find_linear_pairs(module: torch.nn.Module, inputs: torch.Tensor) -> list[tuple[str, str]]:
    """(first, second) module names of the Linear pairs the plan can shard, in execution order:
    the first's output reaches the second through elementwise ops only and is used nowhere
    else, and each Linear is called exactly once."""
    from torch import nn

    linears = {
        id(child.weight): name
        for name, child in module.named_modules()
        if isinstance(child, nn.Linear)
    }
    if not linears:
        return []
    ops, keep = _record_ops(module, inputs)
    del keep  # held only while recording, so that tensor ids stay unique
    calls: dict[str, int] = {}
    linear_ops: dict[int, str] = {}
    for index, op in enumerate(ops):
        if op.weight_id is not None and op.weight_id in linears:
            name = linears[op.weight_id]
            calls[name] = calls.get(name, 0) + 1
            linear_ops[index] = name
    consumers: dict[int, list[int]] = {}
    for index, op in enumerate(ops):
        for tensor in set(op.inputs):
            consumers.setdefault(tensor, []).append(index)
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for index, first in linear_ops.items():
        if calls[first] != 1 or first in used:
            continue
        second = _follow_elementwise(ops, consumers, index, linear_ops)
        if second is not None and calls[second] == 1 and second not in used:
            pairs.append((first, second))
            used.update((first, second))
    return pairs


def _follow_elementwise(
    ops: list[_Op], consumers: dict[int, list[int]], start: int, linear_ops: dict[int, str]
) -> str | None:
    """The Linear that the output of op `start` reaches through elementwise ops only."""
    if len(ops[start].outputs) != 1:
        return None
    tensor = ops[start].outputs[0]
    while True:
        users = consumers.get(tensor, [])
        # In-place elementwise ops (ReLU(inplace=True), eval-mode dropout returning its input)
        # keep the same tensor: not a step of the chain, not another use either.
        onward = [
            i for i in users
            if not (ops[i].name in ELEMENTWISE_OPS and ops[i].outputs == [tensor])
        ]  # fmt: skip
        if len(onward) != 1:
            return None
        op = ops[onward[0]]
        if onward[0] in linear_ops:
            return linear_ops[onward[0]] if op.inputs[:1] == [tensor] else None
        if op.name not in ELEMENTWISE_OPS or set(op.inputs) != {tensor} or len(op.outputs) != 1:
            return None
        tensor = op.outputs[0]


def _record_ops(module: torch.nn.Module, inputs: torch.Tensor) -> tuple[list[_Op], list[Any]]:
    """Every torch function call of one forward that produces tensors, with the ids of its
    tensor inputs and outputs (the tensors are kept alive, so ids are not reused)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    ops: list[_Op] = []
    keep: list[Any] = []

    class Recorder(TorchFunctionMode):
        def __torch_function__(  # type: ignore[no-untyped-def]
            self, func, types, args=(), kwargs=None
        ):
            result = func(*args, **(kwargs or {}))
            outputs = [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
            if outputs:
                tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
                keep.extend(tensors + outputs)
                op = _Op(
                    getattr(func, "__name__", "").strip("_"),
                    func,
                    [id(t) for t in tensors],
                    [id(t) for t in outputs],
                )
                if func is torch.nn.functional.linear and len(args) > 1:
                    op.weight_id = id(args[1])
                    op.inputs = [id(args[0])]
                ops.append(op)
            return result

    with torch.inference_mode(), Recorder():
        module(inputs)
    return ops, keep


def plan_pairs(
    module: torch.nn.Module, inputs: torch.Tensor, world_size: int
) -> list[tuple[str, str]]:
    """The Linear pairs a `world_size`-way plan shards; `Unsupported` when there are none."""
    from torch import nn

    pairs = find_linear_pairs(module, inputs)
    modules = dict(module.named_modules())
    even = [
        (first, second)
        for first, second in pairs
        if _out_features(modules[first]) % world_size == 0
    ]
    key = f"shard.tensor_parallel={world_size}"
    if not pairs:
        has_linear = any(isinstance(m, nn.Linear) for m in module.modules())
        what = "Linear -> elementwise -> Linear pair" if has_linear else "nn.Linear layer"
        raise Unsupported(f"{key}: the model has no {what} to split across ranks")
    if not even:
        widths = [_out_features(modules[first]) for first, _ in pairs]
        raise Unsupported(f"{key}: no Linear pair's hidden width {widths} divides by {world_size}")
    return even


def _out_features(module: Any) -> int:
    return int(module.out_features)


def tensor_parallel_plan(pairs: Sequence[tuple[str, str]]) -> dict[str, ParallelStyle]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, ParallelStyle] = {}
    for first, second in pairs:
        plan[first] = ColwiseParallel()
        plan[second] = RowwiseParallel()
    return plan


def sample_inputs(variant: TorchVariant, context: BuildContext) -> torch.Tensor:
    """The transforms' sample inputs as the variant takes them (dtype, device)."""
    device = _module_device(variant.module)
    return torch_inputs(np.ascontiguousarray(context.sample_inputs), variant.input_dtype, device)


def _module_device(module: torch.nn.Module) -> torch.device:
    import torch

    for tensor in [*module.parameters(), *module.buffers()]:
        return tensor.device
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# Tensor parallel: the session (parent side)

START_TIMEOUT_S = 300.0
CALL_TIMEOUT_S = 600.0
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class _WorkerSpec:
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
    if config.engine != "torch_eager":
        raise Unsupported(f"{key} runs with runtime.engine=torch_eager")
    if not isinstance(variant, TorchVariant):
        raise Unsupported(f"{key} shards torch models only")
    if source is None:
        raise Unsupported(
            f"{key}: the ranks rebuild the model from its Python entry point; none was given"
        )
    pairs = plan_pairs(
        variant.module, sample_inputs(variant, source.context), config.tensor_parallel
    )
    if config.precision != "int8_static":  # only static quantization calibrates
        source = dataclasses.replace(
            source, context=dataclasses.replace(source.context, calibration_inputs=None)
        )
    return TensorParallelSession(source, config, pairs, variant)


def rank_threads(config: TrialConfig) -> int:
    """The trial's CPU threads are shared out between the ranks (at least one each)."""
    return max(1, config.threads // config.tensor_parallel)


class TensorParallelSession:
    """`config.tensor_parallel` worker processes holding one shard each; see the module
    docstring. Close it (or use it as a context manager) to stop the workers."""

    fixed_batch: int | None = None

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
        spec = _WorkerSpec(
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

    def _start(self, spec: _WorkerSpec) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env["OMP_NUM_THREADS"] = str(spec.threads)
        for rank in range(self.world_size):
            parent_end, child_end = multiprocessing.Pipe(duplex=True)
            log = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the workers)
            self._logs.append(log)
            self._conns.append(parent_end)
            command = [
                sys.executable, "-m", "workers.sharding", "--rank", str(rank),
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
                    torch_inputs(batch, variant.input_dtype, _module_device(variant.module)),
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
                    return message[1]  # type: ignore[no-any-return]
                raise RuntimeError(f"tensor-parallel rank {rank} sent {message[0]!r} unasked")

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
# Tensor parallel: one rank (worker side)


class _Rank:
    def __init__(self, spec: _WorkerSpec, rank: int, world_size: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        from workers.loading import load_torch
        from workers.transforms import build_variant

        torch.set_num_threads(spec.threads)
        self.rank = rank
        config = spec.config
        on_cuda = config.device == "cuda"
        if on_cuda:
            torch.cuda.set_device(rank)
            self.device = torch.device("cuda", rank)
        else:
            self.device = torch.device("cpu")
        source = spec.source
        model = load_torch(source.entry_point, list(source.python_path))
        if model.sha256 != source.sha256:
            raise Unsupported(
                f"shard.tensor_parallel={world_size}: {source.entry_point} returned other "
                "weights in a fresh process than in the trial's (training without a fixed "
                "seed?); the ranks must shard the very model that was evaluated"
            )
        variant = build_variant(TorchVariant(model.module), config, source.context)
        assert isinstance(variant, TorchVariant)  # torch_eager keeps torch variants
        self.module = module_on(variant.module, self.device)
        self.input_dtype = variant.input_dtype
        inputs = torch_inputs(
            np.ascontiguousarray(source.context.sample_inputs), self.input_dtype, self.device
        )
        pairs = find_linear_pairs(self.module, inputs)
        if not set(spec.pairs) <= set(pairs):
            raise RuntimeError(f"rank {rank} planned {pairs}, the session {list(spec.pairs)}")
        store = dist.TCPStore(
            "127.0.0.1", spec.store_port, is_master=False,
            timeout=timedelta(seconds=spec.timeout_s),
        )  # fmt: skip
        dist.init_process_group(
            "nccl" if on_cuda else "gloo", store=store, rank=rank, world_size=world_size,
            timeout=timedelta(seconds=spec.timeout_s),
            device_id=self.device if on_cuda else None,
        )  # fmt: skip
        mesh = init_device_mesh(self.device.type, (world_size,))
        parallelize_module(self.module, mesh, tensor_parallel_plan(spec.pairs))
        self.kernels = kernels_for(config, threads=spec.threads)

    def shard_shapes(self) -> dict[str, list[int]]:
        """The local shape of every sharded parameter on this rank."""
        from torch.distributed.tensor import DTensor

        return {
            name: list(parameter.to_local().shape)
            for name, parameter in self.module.named_parameters()
            if isinstance(parameter, DTensor)
        }

    def forward(self, batch: np.ndarray) -> np.ndarray:
        with self.kernels.applied():
            inputs = torch_inputs(batch, self.input_dtype, self.device)
            try:
                outputs = self.module(inputs)
            except RuntimeError as error:
                refused = sdpa_unsupported(error, self.kernels.sdpa_backend)
                if refused is not None:
                    raise refused from error
                raise
            return to_numpy(first_tensor(outputs))


def _error_kind(error: BaseException) -> str:
    if isinstance(error, Unsupported):
        return "unsupported"
    torch = sys.modules.get("torch")
    if isinstance(error, MemoryError) or (
        torch is not None and isinstance(error, torch.OutOfMemoryError)
    ):
        return "oom"
    return "error"


def _exit_with_parent(parent: int, interval_s: float = 1.0) -> None:
    """A rank whose session process is gone (killed, say, by a trial timeout) exits, even when
    it is blocked in a collective waiting for a peer."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(3)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def worker_main(argv: Sequence[str] | None = None) -> int:
    """One tensor-parallel rank: receive the spec, build and shard the model, say ready, then
    answer batches until told to stop (None) or the parent goes away (EOF)."""
    parser = argparse.ArgumentParser(prog="python -m workers.sharding")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    _exit_with_parent(args.parent)
    conn = Connection(args.fd)
    rank: _Rank | None = None
    try:
        spec: _WorkerSpec = conn.recv()
        rank = _Rank(spec, args.rank, args.world_size)
        conn.send(("ready", rank.shard_shapes()))
        while True:
            try:
                batch = conn.recv()
            except EOFError:
                return 0
            if batch is None:
                return 0
            started = time.perf_counter()
            outputs = rank.forward(batch)
            if args.rank == 0:
                conn.send(("out", outputs, time.perf_counter() - started))
    except BaseException as error:
        detail = "".join(traceback.format_exception_only(type(error), error)).strip()
        if _error_kind(error) == "error":
            detail = traceback.format_exc(limit=-3).strip()
        with contextlib.suppress(OSError, ValueError):
            conn.send(("error", _error_kind(error), detail))
        return 1
    finally:
        distributed = sys.modules.get("torch.distributed")
        if distributed is not None and distributed.is_initialized():
            distributed.destroy_process_group()
        conn.close()


# ---------------------------------------------------------------------------------------------
# Data parallel (CUDA)


class DataParallelSession:
    """`config.data_parallel` replicas of the variant, replica i on cuda:i (compiled when the
    engine is torch_compile); each call splits the batch across them."""

    fixed_batch: int | None = None

    def __init__(self, variant: TorchVariant, config: TrialConfig) -> None:
        import torch

        self.replicas = config.data_parallel
        self._devices = [torch.device("cuda", index) for index in range(self.replicas)]
        self._modules = [module_on(variant.module, device) for device in self._devices]
        self._input_dtype = variant.input_dtype
        self._kernels = kernels_for(config)
        self._forwards: list[Callable[[torch.Tensor], Any]] = list(self._modules)
        if config.engine == "torch_compile":
            torch._dynamo.reset()
            self._forwards = [compile_module(m, config.compile_mode) for m in self._modules]
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
                outputs = [
                    first_tensor(forward(x))
                    for forward, x in zip(self._forwards, inputs, strict=False)
                ]
            except Exception as error:
                refused = sdpa_unsupported(error, self._kernels.sdpa_backend)
                if refused is not None:
                    raise refused from error
                raise
            return np.concatenate([to_numpy(output) for output in outputs])

    def close(self) -> None:
        self._forwards, self._modules = [], []


if __name__ == "__main__":
    # Run as `python -m workers.sharding`: use the importable module's definitions, so the
    # spec's classes unpickle as workers.sharding.*, not __main__.*.
    from workers.sharding import worker_main as _main

    sys.exit(_main())
