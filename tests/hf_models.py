"""Tiny Hugging Face model directories built from a config (nothing downloaded): a BERT
encoder with its WordPiece tokenizer, with or without a classification head, and a ViT
image classifier with its image processor; and the text and images to judge them by."""

from __future__ import annotations

from pathlib import Path

WORDS = [
    "the",
    "a",
    "boat",
    "doctor",
    "dinner",
    "cooked",
    "repaired",
    "old",
    "young",
    "city",
    "team",
    "sold",
    "lost",
    "keys",
]
SENTENCES = [
    "the old doctor cooked dinner",
    "a young team sold the boat",
    "the city lost the keys",
    "a doctor repaired the old boat",
    "the team cooked a dinner",
    "young keys sold",
]


def bert_directory(
    path: Path,
    classes: int | None = None,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int = 64,
    max_length: int = 64,
) -> Path:
    """A BERT (by default 2 layers, hidden 32) with random weights, saved with its WordPiece
    tokenizer; a sequence classifier of `classes` labels where given, else the bare encoder."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertModel,
        BertTokenizerFast,
    )

    path.mkdir(parents=True, exist_ok=True)
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(str(path))
    config = BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_length,
        num_labels=classes or 2,
    )
    torch.manual_seed(0)
    model = BertModel(config) if classes is None else BertForSequenceClassification(config)
    model.eval().save_pretrained(str(path))
    return path


def vit_directory(path: Path, classes: int = 3) -> Path:
    """A 1-layer ViT classifier on 32x32 images, saved with its image processor."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    path.mkdir(parents=True, exist_ok=True)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=classes,
    )
    torch.manual_seed(0)
    ViTForImageClassification(config).eval().save_pretrained(str(path))
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(str(path))
    return path


def text_file(path: Path, lines: list[str] = SENTENCES) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def image_directory(path: Path, count: int = 4) -> Path:
    """`count` small RGB images of different colours and sizes."""
    from PIL import Image

    path.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        colour = (60 * index % 256, 255 - 50 * index % 256, 30 * index % 256)
        Image.new("RGB", (40 + 8 * index, 36), colour).save(path / f"image-{index}.png")
    return path
