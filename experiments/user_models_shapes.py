"""Models of `experiments/user_models.py` whose shapes are unusual for a tuner:

- `onet`: facenet-pytorch's MTCNN ONet, a torch module with three outputs a crop (box
  regressions [N, 4], landmarks [N, 10], face probabilities [N, 2]), built by the user's
  entry point `experiments/onet_entry.py` from the wheel's own source and weights, on 48×48
  crops of scikit-learn's sample images at many positions and scales;
- `ddddocr-common` and `ddddocr-old`: the ONNX OCR models of the `ddddocr` wheel, which take
  only a batch of one (input declared [1, 1, 64, W]) and declare an output [1, seqlen] while
  returning [T, 1, classes]; on synthetic captchas preprocessed as ddddocr does.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from experiments.wheels import WHEELS, wheel_member

FACE_CROP = 48
CAPTCHA_SIZE = (120, 48)  # width, height as rendered; ddddocr resizes to height 64
CAPTCHA_CHARACTERS = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def onet(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """ONet through the user's entry point beside the request (the wheel's mtcnn.py and
    onet.pt copied next to it), on 256 face-detector crops."""
    folder = work / "onet"
    folder.mkdir(parents=True, exist_ok=True)
    for member in ("facenet_pytorch/models/mtcnn.py", "facenet_pytorch/data/onet.pt"):
        shutil.copyfile(wheel_member(work, WHEELS["facenet"], member), folder / Path(member).name)
    shutil.copyfile(Path(__file__).with_name("onet_entry.py"), folder / "onet_entry.py")
    data = work / "onet-crops.npz"
    np.savez(data, inputs=face_crops(256))
    return {"entry_point": "onet_entry:build"}, {"npz": str(data)}, "fidelity"


def face_crops(count: int, seed: int = 0) -> np.ndarray:
    """`count` square crops of scikit-learn's sample photographs, sides from 24 to 320
    pixels at random positions, resized to 48×48 and normalised as MTCNN does before ONet
    ((x - 127.5) / 128): float32 [count, 3, 48, 48]."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    crops = []
    for index in range(count):
        photo = photos[index % len(photos)]
        height, width = photo.shape[:2]
        side = int(rng.integers(24, min(height, width, 320) + 1))
        top, left = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
        crop = Image.fromarray(photo[top : top + side, left : left + side])
        pixels = np.asarray(crop.resize((FACE_CROP, FACE_CROP), Image.BILINEAR), np.float32)
        crops.append(((pixels - 127.5) * 0.0078125).transpose(2, 0, 1))
    return np.stack(crops)


def ddddocr_common(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    return _ddddocr(work, "common")


def ddddocr_old(work: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    return _ddddocr(work, "common_old")


def _ddddocr(work: Path, model: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """One of ddddocr's OCR models, as the wheel ships it, on 48 synthetic captchas."""
    onnx = wheel_member(work, WHEELS["ddddocr"], f"ddddocr/{model}.onnx")
    data = work / f"ddddocr-{model}.npz"
    np.savez(data, inputs=np.stack([ddddocr_input(captcha(seed)) for seed in range(48)]))
    return {"onnx": str(onnx)}, {"npz": str(data)}, "fidelity"


def captcha(seed: int) -> Any:
    """A captcha-like RGB image (PIL), different for each seed: four to six characters of
    varied size, colour and tilt on a light background, crossed by noise lines and dots."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    width, height = CAPTCHA_SIZE
    image = Image.new("RGB", CAPTCHA_SIZE, _colour(rng, 190, 256))
    text = "".join(rng.choice(list(CAPTCHA_CHARACTERS), size=int(rng.integers(4, 7))))
    step = (width - 10) // len(text)
    for position, character in enumerate(text):
        font = ImageFont.load_default(size=int(rng.integers(26, 38)))
        glyph = Image.new("RGBA", (height, height), (0, 0, 0, 0))
        ImageDraw.Draw(glyph).text((8, 2), character, font=font, fill=_colour(rng, 0, 120))
        glyph = glyph.rotate(float(rng.uniform(-25, 25)), resample=Image.BICUBIC)
        image.paste(glyph, (5 + position * step + int(rng.integers(-3, 4)), 0), glyph)
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        ends = [(int(rng.integers(0, width)), int(rng.integers(0, height))) for _ in range(2)]
        draw.line(ends, fill=_colour(rng, 60, 200), width=int(rng.integers(1, 3)))
    for _ in range(120):
        draw.point(
            (int(rng.integers(0, width)), int(rng.integers(0, height))), _colour(rng, 0, 256)
        )
    return image


def _colour(rng: np.random.Generator, low: int, high: int) -> tuple[int, int, int]:
    red, green, blue = (int(v) for v in rng.integers(low, high, 3))
    return red, green, blue


def ddddocr_input(image: Any) -> np.ndarray:
    """ddddocr's preprocessing for its own models (`OCREngine._preprocess_image`): resized
    to height 64 keeping the aspect ratio (Lanczos), grey, scaled to [0, 1]: float32
    [1, 64, W] (the batch axis is added by the batch)."""
    from PIL import Image

    width, height = image.size
    resized = image.resize((int(width * (64 / height)), 64), Image.LANCZOS).convert("L")
    return (np.asarray(resized, np.float32) / 255.0)[None]
