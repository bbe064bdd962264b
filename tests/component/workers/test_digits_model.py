from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.digits import model as digits_model
from tests.workers_support import REPO


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in module.state_dict().items()}


def test_eval_data_is_the_held_out_quarter(digits: tuple[np.ndarray, np.ndarray]) -> None:
    inputs, labels = digits
    assert inputs.shape == (450, 1, 8, 8) and inputs.dtype == np.float32
    assert labels.shape == (450,) and labels.dtype == np.int64
    assert inputs.min() >= 0.0 and inputs.max() <= 1.0
    assert sorted(np.unique(labels)) == list(range(10))


def test_trained_model_reaches_95_percent(
    digits_module: torch.nn.Module, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    inputs, labels = digits
    assert not digits_module.training
    with torch.inference_mode():
        predictions = digits_module(torch.from_numpy(inputs)).argmax(dim=1).numpy()
    assert np.mean(predictions == labels) >= 0.95


def test_weights_are_trained_once_then_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(digits_model, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(digits_model, "train", functools.partial(digits_model.train, epochs=2))
    first = _state(digits_model.build_model())  # trains afresh into tmp_path
    cached = digits_model.cache_path()
    written = cached.stat().st_mtime_ns
    second = _state(digits_model.build_model())
    assert cached.stat().st_mtime_ns == written, "the second call must load, not retrain"
    assert [p.name for p in tmp_path.glob("*.safetensors")] == [cached.name]
    again = digits_model.train().state_dict()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name])
        assert torch.equal(tensor, again[name])


@pytest.mark.slow
def test_the_cached_weights_are_what_training_from_scratch_gives(
    digits_module: torch.nn.Module,
) -> None:
    reference = digits_module.state_dict()  # trained by another call, maybe another process
    fresh = digits_model.train().state_dict()
    assert all(torch.equal(fresh[name], reference[name]) for name in reference)


def test_training_does_not_depend_on_the_callers_thread_count() -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = digits_model.train(epochs=2).state_dict()
        torch.set_num_threads(2)
        two = digits_model.train(epochs=2).state_dict()
        assert torch.get_num_threads() == 2  # the caller's setting is given back
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(one[name], two[name]) for name in one)


_TRAIN_ONCE = """
import sys
from pathlib import Path
from safetensors.torch import load_file
from experiments.digits import model as m
m.CACHE_DIR = Path(sys.argv[1])
train = m.train
def counted_train():
    print("trained", flush=True)
    return train()
m.train = counted_train
m.build_model()
print(sorted(load_file(m.cache_path()))[0])
"""


@pytest.mark.slow
def test_concurrent_processes_train_once(tmp_path: Path) -> None:
    command = [sys.executable, "-c", _TRAIN_ONCE, str(tmp_path)]
    processes = [
        subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert all(process.returncode == 0 for process in processes)
    assert sum(output.count("trained") for output in outputs) == 1
    assert not list(tmp_path.glob("*.tmp"))
