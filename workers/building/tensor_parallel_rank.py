"""One rank of a tensor-parallel session (`workers.building.sharding.TensorParallelSession`), run as
`python -m workers.building.tensor_parallel_rank` in its own process.

The rank receives its `WorkerSpec` over a pipe, rebuilds the variant itself from the model's
entry point (the same transforms on the same weights, checked by hash: modules are never
pickled across processes), joins the process group (gloo on the CPU, NCCL with one GPU per rank
on CUDA) through the session's TCP store, shards the model with `parallelize_module` over a 1-D
`DeviceMesh`, says it is ready, then answers batches until told to stop. It exits by itself when
the session's process goes away (its pipe closes; a watchdog catches it even mid-collective).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from datetime import timedelta
from multiprocessing.connection import Connection

import numpy as np

from autotune.core.errors import Unsupported
from workers.building.sharding import WorkerSpec
from workers.building.sharding_plan import find_linear_pairs, tensor_parallel_plan
from workers.building.torch_io import TorchOutputs, module_on, structure_text, torch_inputs
from workers.building.torch_kernels import kernels_for, sdpa_unsupported
from workers.building.variants import TorchVariant


class _Rank:
    def __init__(self, spec: WorkerSpec, rank: int, world_size: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        from workers.building.transforms import build_variant
        from workers.loading.workloads import load_torch

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
        self.outputs = TorchOutputs(source.context.fixed_batch)
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
            return self.outputs.numpy(outputs, batch.shape[0])

    def nesting(self) -> tuple[str | None, dict[str, str]]:
        """How the last outputs nest (`torch_io.structure_text`; None: a lone tensor) and
        which were left out of judging, and why."""
        structure = self.outputs.structure
        return None if structure is None else structure_text(structure), self.outputs.left_out


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
    parser = argparse.ArgumentParser(prog="python -m workers.building.tensor_parallel_rank")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    _exit_with_parent(args.parent)
    conn = Connection(args.fd)
    rank: _Rank | None = None
    try:
        spec: WorkerSpec = conn.recv()
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
                conn.send(("out", outputs, time.perf_counter() - started, rank.nesting()))
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


if __name__ == "__main__":
    sys.exit(worker_main())
