"""A small image classifier whose best configuration on a CPU gains little over the
unmodified model: the case where a headline's interval matters most.

Five Conv-BatchNorm-ReLU blocks and a linear head over 64×64 images, random weights (seed 0),
exported to ONNX with a dynamic batch; 64 random images to judge it by (fidelity to the
unmodified model's ten class scores). Written once under `experiments/small_gain/.cache/`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
MODEL = CACHE / "classifier.onnx"
DATA = CACHE / "images.npz"
SIZE = 64
WIDTH = 24


def ensure_files() -> tuple[Path, Path]:
    """The model and its data, written on first use."""
    if not MODEL.is_file():
        _export(MODEL)
    if not DATA.is_file():
        images = np.random.default_rng(0).standard_normal((64, 3, SIZE, SIZE), np.float32)
        np.savez(DATA, inputs=images)
    return MODEL, DATA


def _export(path: Path) -> None:
    import torch

    torch.manual_seed(0)

    def block(c_in: int, c_out: int, stride: int) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Conv2d(c_in, c_out, 3, stride, 1),
            torch.nn.BatchNorm2d(c_out),
            torch.nn.ReLU(),
        )

    w = WIDTH
    net = torch.nn.Sequential(
        block(3, w, 2), block(w, w, 1), block(w, 2 * w, 2), block(2 * w, 2 * w, 1),
        block(2 * w, 4 * w, 2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(4 * w, 10),
    ).eval()  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.randn(1, 3, SIZE, SIZE)
    with torch.no_grad():
        torch.onnx.export(
            net, (example,), str(path), input_names=["input"], output_names=["scores"],
            dynamic_axes={"input": {0: "n"}}, dynamo=False, opset_version=17,
        )  # fmt: skip


if __name__ == "__main__":
    print(*ensure_files())
