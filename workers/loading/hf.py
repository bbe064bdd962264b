"""Hugging Face models from a local directory, and the data their own preprocessing makes.

The directory is read with `transformers` and nothing else: `local_files_only=True` (no
download) and no remote code. The model becomes one torch module taking one array, as every
workload does:
- text tasks take token ids int64 [N, L] padded with the tokenizer's padding id; the
  attention mask is where the ids are not padding. `feature-extraction` returns embeddings
  mean-pooled over the real tokens [N, hidden]; `text-classification` returns logits.
- `image-classification` takes the image processor's pixel values float32 [N, C, H, W] and
  returns logits.
Sequence length is a property of the data (`data.sequence_length`), not a knob. Imported
only where a workload names a Hugging Face model (it imports torch and transformers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from autotune.core.contract import HF_TEXT_TASKS, HfTask
from autotune.core.errors import RequestError

DEFAULT_SEQUENCE_LENGTH = 128
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".webp"})
# The head each task is loaded with.
HEADS: dict[HfTask, str] = {
    "feature-extraction": "AutoModel",
    "text-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
}


def load_hf_module(directory: str, task: HfTask) -> torch.nn.Module:
    """The directory's model with the task's head, in eval mode, wrapped to take one array."""
    import transformers

    path = _model_directory(directory)
    head = getattr(transformers, HEADS[task])
    try:
        model = head.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as error:
        raise RequestError(
            "model.hf", f"must load as {HEADS[task]} ({type(error).__name__}: {error})", directory
        ) from error
    if task in HF_TEXT_TASKS:
        return TextModel(model.eval(), task, _padding_id(_tokenizer(path)))
    return ImageModel(model.eval())


def text_inputs(directory: str, text_file: str, sequence_length: int | None) -> np.ndarray:
    """Each non-blank line of `text_file`, tokenized by the model's tokenizer to
    `sequence_length` tokens (truncated or padded; by default 128, or the model's longest if
    it is shorter): int64 [lines, length]."""
    path = _model_directory(directory)
    tokenizer = _tokenizer(path)
    longest = _longest_sequence(path)
    if sequence_length is not None and longest is not None and sequence_length > longest:
        raise RequestError(
            "data.sequence_length", f"must be at most the model's {longest} positions",
            sequence_length,
        )  # fmt: skip
    length = sequence_length or min(DEFAULT_SEQUENCE_LENGTH, longest or DEFAULT_SEQUENCE_LENGTH)
    lines = [line for line in _read_text(text_file, "data.text").splitlines() if line.strip()]
    if not lines:
        raise RequestError("data.text", "must hold at least one non-blank line", text_file)
    encoded = tokenizer(
        lines, padding="max_length", truncation=True, max_length=length, return_tensors="np"
    )
    return np.ascontiguousarray(encoded["input_ids"], dtype=np.int64)


def image_inputs(directory: str, image_directory: str) -> np.ndarray:
    """The images of `image_directory` in name order, prepared by the model's image
    processor: float32 [images, channels, height, width]."""
    import transformers
    from PIL import Image

    folder = Path(image_directory)
    if not folder.is_dir():
        raise RequestError("data.images", "must be an existing directory", image_directory)
    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise RequestError(
            "data.images",
            f"must hold images ({', '.join(sorted(IMAGE_SUFFIXES))})",
            image_directory,
        )
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(
            str(_model_directory(directory)), local_files_only=True, trust_remote_code=False
        )
    except Exception as error:
        raise RequestError(
            "model.hf", f"must hold an image processor ({type(error).__name__}: {error})", directory
        ) from error
    images = []
    for file in files:
        try:
            with Image.open(file) as image:
                images.append(image.convert("RGB"))
        except Exception as error:
            message = f"must be readable images ({error})"
            raise RequestError("data.images", message, str(file)) from error
    pixels = processor(images=images, return_tensors="np")["pixel_values"]
    return np.ascontiguousarray(pixels, dtype=np.float32)


def read_labels(path: str, count: int) -> np.ndarray:
    """One integer label a line (blank lines skipped); exactly `count` of them."""
    lines = [line.strip() for line in _read_text(path, "data.labels").splitlines()]
    try:
        labels = np.array([int(line) for line in lines if line], dtype=np.int64)
    except ValueError as error:
        raise RequestError("data.labels", f"must hold one integer a line ({error})", path) from None
    if labels.shape[0] != count:
        raise RequestError(
            "data.labels", f"must hold one label for each of the {count} samples", labels.shape[0]
        )
    return labels


def _model_directory(directory: str) -> Path:
    path = Path(directory)
    if not (path / "config.json").is_file():
        raise RequestError("model.hf", "must be a directory holding config.json", directory)
    return path


def _longest_sequence(path: Path) -> int | None:
    """The most positions the model's config allows, where it says."""
    import json

    config = json.loads((path / "config.json").read_text())
    longest = config.get("max_position_embeddings")
    return int(longest) if isinstance(longest, int) else None


def _tokenizer(path: Path) -> Any:
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=False
        )
    except Exception as error:
        raise RequestError(
            "model.hf", f"must hold a tokenizer ({type(error).__name__}: {error})", str(path)
        ) from error


def _padding_id(tokenizer: Any) -> int:
    if tokenizer.pad_token_id is None:
        raise RequestError(
            "model.hf", "the tokenizer must define a padding token", type(tokenizer).__name__
        )
    return int(tokenizer.pad_token_id)


def _read_text(path: str, field: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise RequestError(field, "file must exist", path)
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(field, f"must be UTF-8 text ({error})", path) from None


class TextModel(torch.nn.Module):
    """A text model taking padded token ids alone."""

    def __init__(self, model: Any, task: HfTask, padding_id: int) -> None:
        super().__init__()
        self.model = model
        self.task = task
        self.padding_id = padding_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != self.padding_id).long()
        output = self.model(input_ids=input_ids, attention_mask=mask)
        if self.task != "feature-extraction":
            return output.logits
        hidden = output.last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


class ImageModel(torch.nn.Module):
    """An image classifier taking pixel values alone."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits
