"""Tensor parallelism over gloo worker processes on the CPU, the Linear-pair plan, the trial
path, cleanup; data parallelism on CUDA (skipped without two GPUs)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from torch import nn

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import parse_config
from tests.sharding_models import INPUTS, build_mlp, build_two_heads, mlp_source
from tests.workers_support import REPO, digits_workload, spec_for
from workers import run_trial
from workers.building.runtimes import build_session, check_runtime
from workers.building.sharding import ModelSource, TensorParallelSession, tensor_parallel_session
from workers.building.sharding_plan import find_linear_pairs, plan_pairs
from workers.building.variants import BuildContext, TorchVariant
from workers.cache import WorkloadCache
from workers.loading.workloads import load_torch, torch_sha256
from workers.predictor import Predictor


def reference(module: nn.Module, inputs: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return module(torch.from_numpy(inputs)).numpy()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[TensorParallelSession]]:
    """Every TensorParallelSession built during the test; closed afterwards whatever happens."""
    built: list[TensorParallelSession] = []
    real_init = TensorParallelSession.__init__

    def recording_init(self: TensorParallelSession, *args: object, **kwargs: object) -> None:
        built.append(self)
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(TensorParallelSession, "__init__", recording_init)
    yield built
    for session in built:
        if hasattr(session, "_finalizer"):
            session.close()


# --- the plan --------------------------------------------------------------------------------


class FunctionalBlock(nn.Module):
    """A transformer-style feed-forward block: functional activation, dropout, residual."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.dropout(torch.nn.functional.silu(self.up(x)) * 0.5))


class Branching(nn.Module):
    """The hidden activations are used twice: splitting them would be wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.up(x))
        return self.down(hidden) + hidden.sum(dim=-1, keepdim=True)


class Shared(nn.Module):
    """One Linear called twice cannot be sharded one way for both calls."""

    def __init__(self) -> None:
        super().__init__()
        self.square = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.square(torch.relu(self.square(x)))


def test_linear_pairs_in_sequential_mlps() -> None:
    deep = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)
    )
    # the middle Linear is the second of the first pair, so it cannot start another
    assert find_linear_pairs(deep.eval(), torch.zeros(2, 8)) == [("0", "2")]


def test_linear_pairs_through_functional_ops_and_dropout() -> None:
    assert find_linear_pairs(FunctionalBlock().eval(), torch.zeros(2, 3, 8)) == [("up", "down")]


def test_linear_pairs_in_a_transformer_encoder_layer() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    assert find_linear_pairs(layer, torch.zeros(2, 5, 16)) == [("linear1", "linear2")]


def test_the_digits_cnn_has_its_classifier_head_as_a_pair(digits_module: nn.Module) -> None:
    pairs = find_linear_pairs(digits_module, torch.zeros(2, 1, 8, 8))
    assert pairs == [("classifier.1", "classifier.3")]


@pytest.mark.parametrize("module", [Branching(), Shared()], ids=["branching", "shared"])
def test_no_pair_where_splitting_would_change_the_result(module: nn.Module) -> None:
    assert find_linear_pairs(module.eval(), torch.zeros(2, 8)) == []
    with pytest.raises(Unsupported, match="no Linear -> elementwise -> Linear pair"):
        plan_pairs(module.eval(), torch.zeros(2, 8), 2)


def test_a_model_without_linear_layers_is_unsupported() -> None:
    convolutional = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 3)).eval()
    with pytest.raises(
        Unsupported, match="shard.tensor_parallel=2: the model has no nn.Linear layer"
    ):
        plan_pairs(convolutional, torch.zeros(1, 1, 8, 8), 2)


def test_a_hidden_width_that_does_not_divide_is_unsupported() -> None:
    odd = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)).eval()
    assert plan_pairs(odd, torch.zeros(1, 4), 2) == [("0", "2")]
    with pytest.raises(Unsupported, match=r"hidden width \[6\] divides by 4"):
        plan_pairs(odd, torch.zeros(1, 4), 4)


# --- two gloo processes ----------------------------------------------------------------------


@pytest.mark.slow
def test_two_way_tensor_parallel_matches_one_process(
    sessions: list[TensorParallelSession],
) -> None:
    module = build_mlp()
    config = parse_config({"shard.tensor_parallel": 2, "runtime.threads": 2}, "torch")
    session = tensor_parallel_session(TorchVariant(module), config, mlp_source(module))
    assert session.pairs == [("0", "2")] and session.threads == 1
    for batch in (INPUTS, INPUTS[:1]):
        np.testing.assert_allclose(session.run(batch), reference(module, batch), atol=1e-5)
    # each rank holds half of the colwise weight's rows and half of the rowwise weight's columns
    for shapes in session.shard_shapes:
        assert shapes["0.weight"] == [16, 12] and shapes["0.bias"] == [16]
        assert shapes["2.weight"] == [5, 16]
    assert len(session.rank0_seconds) == 2 and all(s > 0 for s in session.rank0_seconds)
    pids = session.helper_pids
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    session.close()
    assert session.closed and not any(alive(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        session.run(INPUTS)


@pytest.mark.slow
def test_tensor_parallel_outputs_nest_as_the_module_returns_them(
    sessions: list[TensorParallelSession],
) -> None:
    module = build_two_heads()
    config = parse_config({"shard.tensor_parallel": 2, "runtime.threads": 2}, "torch")
    source = mlp_source(module, "tests.sharding_models:build_two_heads")
    session = tensor_parallel_session(TorchVariant(module), config, source)
    outputs = session.run(INPUTS)
    assert session.outputs_left_out.keys() == {"mean"}
    predicted = Predictor(session, config).structured(outputs)
    assert list(predicted) == ["scores", "mean"] and predicted["mean"] is None
    np.testing.assert_allclose(predicted["scores"], reference(module.mlp, INPUTS), atol=1e-5)


@pytest.mark.slow
def test_a_tensor_parallel_trial_is_measured(sessions: list[TensorParallelSession]) -> None:
    store = WorkloadCache()
    plain = run_trial(spec_for(digits_workload(), {"batch.size": 4}), store)
    sharded = run_trial(
        spec_for(digits_workload(), {"batch.size": 4, "shard.tensor_parallel": 2}), store
    )
    assert sharded.status == "ok", sharded.reason
    assert sharded.metrics is not None and plain.metrics is not None
    assert sharded.metrics.accuracy == pytest.approx(plain.metrics.accuracy, abs=1e-9)
    assert sharded.metrics.latency_p50_ms > 0
    # the ranks' resident memory counts: two more processes with torch loaded
    assert sharded.metrics.peak_memory_mb > plain.metrics.peak_memory_mb + 100
    (session,) = sessions
    assert session.closed and not any(alive(pid) for pid in session.helper_pids)
    assert len(session.rank0_seconds) >= 5


@pytest.mark.slow
def test_ranks_that_load_other_weights_are_refused(
    tmp_path: Path, make_module: Callable[[str], str], sessions: list[TensorParallelSession]
) -> None:
    name = make_module(
        """
        import torch

        def build():  # no seed: every process gets other weights
            return torch.nn.Sequential(
                torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
            )
        """
    )
    module = load_torch(f"{name}:build", [str(tmp_path)]).module
    source = ModelSource(
        f"{name}:build", (str(tmp_path),), torch_sha256(module),
        BuildContext(np.zeros((2, 4), np.float32)),
    )  # fmt: skip
    config = parse_config({"shard.tensor_parallel": 2}, "torch")
    with pytest.raises(Unsupported, match="rank .: .*returned other weights in a fresh process"):
        tensor_parallel_session(TorchVariant(module), config, source)
    (session,) = sessions
    assert session.closed and not any(alive(pid) for pid in session.helper_pids)


@pytest.mark.slow
def test_a_rank_that_dies_fails_the_call_and_the_session_stops(
    sessions: list[TensorParallelSession],
) -> None:
    module = build_mlp()
    config = parse_config({"shard.tensor_parallel": 2, "runtime.threads": 2}, "torch")
    session = tensor_parallel_session(TorchVariant(module), config, mlp_source(module))
    session.run(INPUTS)
    os.kill(session.helper_pids[1], signal.SIGKILL)
    with pytest.raises(RuntimeError, match="tensor-parallel rank"):
        session.run(INPUTS)
    assert session.closed and not any(alive(pid) for pid in session.helper_pids)


def test_without_an_entry_point_tensor_parallel_is_unsupported() -> None:
    module = build_mlp()
    config = parse_config({"shard.tensor_parallel": 2}, "torch")
    with pytest.raises(Unsupported, match="rebuild the model from its Python entry point"):
        build_session(TorchVariant(module), config)


@pytest.mark.parametrize(
    ("config", "reason_part"),
    [
        ({"precision.mode": "int8_dynamic"}, "has no nn.Linear layer"),
        ({"shard.data_parallel": 2}, "one or the other"),
        ({"cuda.graphs": True}, "cuda.graphs=true"),
    ],
)
def test_tensor_parallel_trials_that_are_unsupported(
    config: dict[str, object], reason_part: str, sessions: list[TensorParallelSession]
) -> None:
    result = run_trial(
        spec_for(digits_workload(), {"shard.tensor_parallel": 2, **config}),  # type: ignore[dict-item]
        WorkloadCache(),
    )
    assert result.status == "unsupported" and reason_part in (result.reason or "")
    assert sessions == [], "refused before any process started"


def test_data_parallel_needs_cuda() -> None:
    config = parse_config({"shard.data_parallel": 2, "batch.size": 8}, "torch")
    with pytest.raises(Unsupported, match="needs runtime.device=cuda"):
        check_runtime(config)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_way_tensor_parallel_over_nccl(sessions: list[TensorParallelSession]) -> None:
    module = build_mlp()
    config = parse_config({"shard.tensor_parallel": 2, "runtime.device": "cuda"}, "torch")
    session = tensor_parallel_session(TorchVariant(module), config, mlp_source(module))
    np.testing.assert_allclose(session.run(INPUTS), reference(module, INPUTS), atol=1e-4)
    assert all(shapes["0.weight"] == [16, 12] for shapes in session.shard_shapes)
    session.close()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_data_parallel_trial_on_two_gpus() -> None:
    config = {"shard.data_parallel": 2, "runtime.device": "cuda", "batch.size": 8}
    result = run_trial(spec_for(digits_workload(), config), WorkloadCache())  # type: ignore[arg-type]
    assert result.status == "ok", result.reason


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_data_parallel_outputs_nest_as_the_module_returns_them() -> None:
    module = build_two_heads()
    config = parse_config(
        {"shard.data_parallel": 2, "runtime.device": "cuda", "batch.size": 6}, "torch"
    )
    session = build_session(TorchVariant(module), config)
    outputs = session.run(INPUTS)
    assert session.outputs_left_out.keys() == {"mean"}  # type: ignore[attr-defined]
    predicted = Predictor(session, config).structured(outputs)
    assert list(predicted) == ["scores", "mean"] and predicted["mean"] is None
    np.testing.assert_allclose(predicted["scores"], reference(module.mlp, INPUTS), atol=1e-4)


KILLED_PARENT = """
import os, signal, sys
from tests.sharding_models import INPUTS, build_mlp, mlp_source
from autotune.core.knobs.config import parse_config
from workers.building.sharding import tensor_parallel_session
from workers.building.variants import TorchVariant

module = build_mlp()
config = parse_config({"shard.tensor_parallel": 2, "runtime.threads": 2}, "torch")
session = tensor_parallel_session(TorchVariant(module), config, mlp_source(module))
session.run(INPUTS)
print(*session.helper_pids, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_ranks_exit_when_the_session_process_is_killed() -> None:
    import subprocess
    import sys
    import time

    finished = subprocess.run(
        [sys.executable, "-c", KILLED_PARENT], cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert finished.returncode == -signal.SIGKILL, finished.stderr
    pids = [int(pid) for pid in finished.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids)
