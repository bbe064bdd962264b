"""The bundled example: a small CNN on scikit-learn's digits, trained in seconds.

`build_model()` is the workload's model entry point, `eval_data()` its data entry point.
Training is deterministic; the trained weights are cached as safetensors next to this file
under `.cache/`, keyed by a hash of the architecture and training code, so every process
(and every Ray worker on this machine) tunes the very same weights.

`architecture()` is the entry point for requests that send their own weights: an untrained
CNN that the weights file is loaded into. Such a file is written by

    python -m experiments.digits.model export-weights OUT.safetensors [--seed N] [--epochs N]

which trains with that seed (the defaults give the cached weights); another seed gives other
weights, that is another model to tune.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import inspect
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

CACHE_DIR = Path(__file__).resolve().parent / ".cache"
SEED = 0
EPOCHS = 20
BATCH_SIZE = 32
LEARNING_RATE = 2e-3


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    inputs = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        inputs, labels, test_size=0.25, random_state=0, stratify=labels
    )
    return train_x, test_x, train_y, test_y


def eval_data() -> tuple[np.ndarray, np.ndarray]:
    """The held-out test split: inputs float32 [N, 1, 8, 8], labels int64 [N]."""
    _, test_x, _, test_y = _split()
    return test_x, test_y


def train(seed: int = SEED, epochs: int = EPOCHS) -> DigitsCNN:
    """Train from scratch; the seed fixes the initial weights and the data order (Adam,
    cross-entropy). One thread: the result would otherwise depend on the caller's thread
    count (a Ray worker tuning at 1 thread and a process at 2 sum in different orders)."""
    train_x, _, train_y, _ = _split()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        model = DigitsCNN()
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        order = torch.Generator().manual_seed(seed)
        inputs, labels = torch.from_numpy(train_x), torch.from_numpy(train_y)
        model.train()
        for _ in range(epochs):
            for batch in torch.randperm(len(inputs), generator=order).split(BATCH_SIZE):
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def _training_digest() -> str:
    settings = repr((SEED, EPOCHS, BATCH_SIZE, LEARNING_RATE))
    code = inspect.getsource(DigitsCNN) + inspect.getsource(_split) + inspect.getsource(train)
    return hashlib.sha256((code + settings).encode()).hexdigest()[:12]


# Taken at import, so the name of the weights does not depend on later monkeypatching.
TRAINING_DIGEST = _training_digest()


def cache_path() -> Path:
    """Where the trained weights live; the name changes whenever the training code does."""
    return CACHE_DIR / f"cnn-{TRAINING_DIGEST}.safetensors"


def build_model() -> nn.Module:
    """The trained CNN in eval mode; trains once per machine, then loads the cached weights."""
    from safetensors.torch import load_file, save_file

    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Two processes starting at once must train once and load the same weights.
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            weights = {k: v.contiguous() for k, v in train().state_dict().items()}
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            os.close(fd)
            save_file(weights, tmp)
            os.replace(tmp, path)
    model = DigitsCNN()
    model.load_state_dict(load_file(path))
    return model.eval()


def architecture() -> nn.Module:
    """The untrained CNN: the entry point of a request that sends its weights."""
    return DigitsCNN()


def export_weights(path: Path, seed: int = SEED, epochs: int = EPOCHS) -> None:
    """Write trained weights as safetensors; the default seed and epochs give the cached ones."""
    from safetensors.torch import save_file

    model = build_model() if (seed, epochs) == (SEED, EPOCHS) else train(seed, epochs)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.digits.model")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser(
        "export-weights", help="train and write the weights as a safetensors file"
    )
    export.add_argument("out", type=Path, help="the .safetensors file to write")
    export.add_argument("--seed", type=int, default=SEED, help=f"default {SEED}")
    export.add_argument("--epochs", type=int, default=EPOCHS, help=f"default {EPOCHS}")
    args = parser.parse_args(argv)
    export_weights(args.out, args.seed, args.epochs)


if __name__ == "__main__":
    main()
