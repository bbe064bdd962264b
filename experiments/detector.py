"""A YOLO-like one-stage detector nobody trained: the `detector` workload of
experiments/time_to_answer.py.

    python -m experiments.detector OUT.onnx [--data OUT.npz] [--images 64] [--seed 0]

`build_detector()` is a CSP/darknet-style CNN of conv-BN-SiLU blocks at 320x320 RGB input
(about 3M parameters): a backbone with strides down to /32, an SPPF block, a small FPN/PAN
neck, and a head of 1x1 convolutions giving, for 3 anchors in each cell of the three scales
(/8, /16, /32), 4 box offsets, an objectness logit and 20 class logits. The three heads are
concatenated into one output [N, 6300, 25] of raw logits, decoded by the caller as a YOLO
export leaves them (sigmoids and anchor arithmetic would squash the outputs towards 0.5 and
make every variant look faithful).

The weights come from a fixed torch seed; the batch-norm statistics are then collected on
seeded synthetic images (`synthetic_images`), so that every layer's activations have about
unit scale, as in a trained network, instead of shrinking through the depth.
`export_detector(path)` writes it to ONNX (opset 17, dynamic batch axis, the legacy exporter:
`dynamic_axes` needs `dynamo=False`); `write_detector_data(path, n, seed)` writes the
evaluation data, an .npz with one array `inputs` of float32 images [n, 3, 320, 320] in
[0, 1]. Without labels the model is judged by fidelity to the unmodified model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn

INPUT_SIZE = 320
CHANNELS = 3
NUM_CLASSES = 20
ANCHORS_PER_CELL = 3
STRIDES = (8, 16, 32)
OUTPUTS_PER_ANCHOR = 5 + NUM_CLASSES  # x, y, w, h, objectness, classes
ANCHORS_TOTAL = sum(ANCHORS_PER_CELL * (INPUT_SIZE // s) ** 2 for s in STRIDES)  # 6300
SEED = 0
CALIBRATION_IMAGES = 16


class ConvBnSiLU(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int = 1, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, channels: int, shortcut: bool = True) -> None:
        super().__init__()
        self.cv1 = ConvBnSiLU(channels, channels, 1)
        self.cv2 = ConvBnSiLU(channels, channels, 3)
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.shortcut else y


class CSP(nn.Module):
    """Cross-stage partial block (YOLOv5's C3): half the channels through `n` bottlenecks,
    half around them, joined by a 1x1 convolution."""

    def __init__(self, c_in: int, c_out: int, n: int = 1, shortcut: bool = True) -> None:
        super().__init__()
        hidden = c_out // 2
        self.cv1 = ConvBnSiLU(c_in, hidden, 1)
        self.cv2 = ConvBnSiLU(c_in, hidden, 1)
        self.blocks = nn.Sequential(*(Bottleneck(hidden, shortcut) for _ in range(n)))
        self.cv3 = ConvBnSiLU(2 * hidden, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat([self.blocks(self.cv1(x)), self.cv2(x)], dim=1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max-pools, concatenated."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        hidden = c_in // 2
        self.cv1 = ConvBnSiLU(c_in, hidden, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.cv2 = ConvBnSiLU(4 * hidden, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        p1 = self.pool(x)
        p2 = self.pool(p1)
        return self.cv2(torch.cat([x, p1, p2, self.pool(p2)], dim=1))


class Detector(nn.Module):
    def __init__(self, width: int = 40, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        w1, w2, w3, w4, w5 = width // 2, width, 2 * width, 4 * width, 8 * width
        self.stem = ConvBnSiLU(CHANNELS, w1, 3, 2)  # /2
        self.stage2 = nn.Sequential(ConvBnSiLU(w1, w2, 3, 2), CSP(w2, w2, 1))  # /4
        self.stage3 = nn.Sequential(ConvBnSiLU(w2, w3, 3, 2), CSP(w3, w3, 2))  # /8
        self.stage4 = nn.Sequential(ConvBnSiLU(w3, w4, 3, 2), CSP(w4, w4, 3))  # /16
        self.stage5 = nn.Sequential(ConvBnSiLU(w4, w5, 3, 2), CSP(w5, w5, 1), SPPF(w5, w5))
        # neck: top-down (FPN), then bottom-up (PAN)
        self.reduce5 = ConvBnSiLU(w5, w4, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top4 = CSP(2 * w4, w4, 1, shortcut=False)
        self.reduce4 = ConvBnSiLU(w4, w3, 1)
        self.out3 = CSP(2 * w3, w3, 1, shortcut=False)
        self.down3 = ConvBnSiLU(w3, w3, 3, 2)
        self.out4 = CSP(2 * w3, w4, 1, shortcut=False)
        self.down4 = ConvBnSiLU(w4, w4, 3, 2)
        self.out5 = CSP(2 * w4, w5, 1, shortcut=False)
        per_cell = ANCHORS_PER_CELL * (5 + num_classes)
        self.heads = nn.ModuleList(nn.Conv2d(c, per_cell, 1) for c in (w3, w4, w5))
        self.num_outputs = 5 + num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.stage3(self.stage2(self.stem(x)))
        p4 = self.stage4(p3)
        p5 = self.stage5(p4)
        r5 = self.reduce5(p5)
        t4 = self.top4(torch.cat([self.up(r5), p4], dim=1))
        r4 = self.reduce4(t4)
        n3 = self.out3(torch.cat([self.up(r4), p3], dim=1))
        n4 = self.out4(torch.cat([self.down3(n3), r4], dim=1))
        n5 = self.out5(torch.cat([self.down4(n4), r5], dim=1))
        outputs = []
        for head, features in zip(self.heads, (n3, n4, n5), strict=True):
            y = head(features)  # [N, A * (5 + C), H, W]
            n, _, h, w = y.shape
            y = y.view(n, ANCHORS_PER_CELL, self.num_outputs, h, w).permute(0, 3, 4, 1, 2)
            outputs.append(y.reshape(n, h * w * ANCHORS_PER_CELL, self.num_outputs))
        return torch.cat(outputs, dim=1)  # [N, ANCHORS_TOTAL, 5 + C]


def synthetic_images(n: int, seed: int) -> np.ndarray:
    """`n` seeded images, float32 [n, 3, 320, 320] in [0, 1]: a colour gradient, a few
    filled rectangles and discs of random colours (things to detect, for a detector), and a
    little noise."""
    rng = np.random.default_rng(seed)
    size = INPUT_SIZE
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = np.empty((n, CHANNELS, size, size), dtype=np.float32)
    for i in range(n):
        start, end = rng.uniform(0, 1, (2, CHANNELS, 1, 1)).astype(np.float32)
        angle = rng.uniform(0, 2 * np.pi)
        ramp = (np.cos(angle) * xx + np.sin(angle) * yy + 1.5) / 3.0
        image = start + (end - start) * ramp
        for _ in range(int(rng.integers(2, 7))):
            colour = rng.uniform(0, 1, (CHANNELS, 1)).astype(np.float32)
            cx, cy = rng.uniform(0.1, 0.9, 2)
            rx, ry = rng.uniform(0.03, 0.25, 2)
            if rng.random() < 0.5:
                inside = (np.abs(xx - cx) < rx) & (np.abs(yy - cy) < ry)
            else:
                inside = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 < 1
            image[:, inside] = colour
        image += rng.normal(0, 0.02, image.shape).astype(np.float32)
        images[i] = np.clip(image, 0.0, 1.0)
    return images


def build_detector(seed: int = SEED) -> Detector:
    """The detector in eval mode: weights from `seed`, batch-norm statistics collected on
    synthetic images (another seed's than the evaluation data's)."""
    torch.manual_seed(seed)
    model = Detector()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None  # a cumulative average over the calibration batches
    calibration = torch.from_numpy(synthetic_images(CALIBRATION_IMAGES, seed + 1000))
    model.train()
    with torch.no_grad():
        for batch in calibration.split(4):
            model(batch)
    model.eval()
    model.requires_grad_(False)
    return model


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def export_detector(path: Path, seed: int = SEED) -> Path:
    """The detector as ONNX at `path`: one input `images` [n, 3, 320, 320], one output
    `predictions` [n, 6300, 25], the batch axis dynamic; opset 17."""
    model = build_detector(seed)
    example = torch.from_numpy(synthetic_images(2, seed + 2000))
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            model, (example,), str(path),
            input_names=["images"], output_names=["predictions"],
            dynamic_axes={"images": {0: "n"}, "predictions": {0: "n"}},
            dynamo=False, opset_version=17,
        )  # fmt: skip
    return path


def write_detector_data(path: Path, n: int = 64, seed: int = 0) -> Path:
    """The evaluation data: an .npz whose one array `inputs` holds `n` seeded images."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, inputs=synthetic_images(n, seed))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the ONNX file to write")
    parser.add_argument("--data", type=Path, help="also write the evaluation .npz here")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    export_detector(args.out, args.seed)
    print(f"wrote {args.out} ({parameter_count(build_detector(args.seed)):,} parameters)")
    if args.data is not None:
        write_detector_data(args.data, args.images, args.seed)
        print(f"wrote {args.data} ({args.images} images)")


if __name__ == "__main__":
    main()
