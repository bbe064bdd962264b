"""The references a request and a trial carry: the model, the data and the quality metric
(`ModelRef`, `DataRef`, `MetricRef`), on `Strict` models that refuse unknown fields."""

from __future__ import annotations

import re
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _check_entry_point(value: str) -> str:
    if not _ENTRY_POINT.match(value):
        raise ValueError("must look like 'package.module:function'")
    return value


EntryPoint = Annotated[str, AfterValidator(_check_entry_point)]

REGISTERED_URI = re.compile(
    r"^models:/(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)"
    r"(?:/(?P<version>[1-9][0-9]*)|@(?P<alias>[A-Za-z0-9_-]+))$"
)


REGISTERED_URI_RULE = (
    "must look like 'models:/NAME/VERSION' or 'models:/NAME@ALIAS' (NAME of letters, digits, "
    "'_', '.', '-'; VERSION a number; ALIAS of letters, digits, '_', '-')"
)


def _check_registered_uri(value: str) -> str:
    if not REGISTERED_URI.match(value):
        raise ValueError(REGISTERED_URI_RULE)
    return value


RegisteredUri = Annotated[str, AfterValidator(_check_registered_uri)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """`true` is not the number 1: a boolean given for a number is refused."""
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _takes_numbers(field.annotation):
            raise ValueError("must be a number, not a boolean")
        return value


def _takes_numbers(annotation: Any) -> bool:
    """Whether a field's type takes numbers and not booleans (`int`, `float | None`, ...)."""
    types = _flat_types(annotation)
    return bool(types & {int, float}) and bool not in types


def _flat_types(annotation: Any) -> set[Any]:
    arguments = get_args(annotation)
    if get_origin(annotation) is Annotated:
        return _flat_types(arguments[0])
    if get_origin(annotation) in (Union, UnionType):
        return {t for argument in arguments for t in _flat_types(argument)}
    return {annotation}


# What a Hugging Face model directory is used for, and so which head it is loaded with and
# what its outputs are: sentence embeddings (mean-pooled over the real tokens) or logits.
HfTask = Literal["feature-extraction", "text-classification", "image-classification"]
HF_TEXT_TASKS: tuple[HfTask, ...] = ("feature-extraction", "text-classification")


# What a file system takes for a path (Linux's PATH_MAX and NAME_MAX): a longer one fails in
# the operating system, not with a rule a user can read.
MAX_PATH_CHARS = 4096
MAX_PATH_PART_CHARS = 255


def local_path(value: str) -> str:
    """`value` where a file system takes it as a path; else ValueError saying why."""
    if "\x00" in value:
        raise ValueError("must be a path without a NUL character")
    longest = max((len(part) for part in value.split("/")), default=0)
    if len(value) > MAX_PATH_CHARS or longest > MAX_PATH_PART_CHARS:
        raise ValueError(
            f"must be a path of at most {MAX_PATH_CHARS} characters, each part at most "
            f"{MAX_PATH_PART_CHARS}"
        )
    return value


LocalPath = Annotated[str, AfterValidator(local_path)]


# The largest batch size a request may fix a model to.
MAX_FIXED_BATCH = 65536


class ModelRef(Strict):
    """Where the model comes from: an ONNX file, trusted local Python code (optionally with
    safetensors weights loaded into the module it returns), a local Hugging Face model
    directory, or an MLflow registered model whose artifact holds an ONNX model."""

    onnx: LocalPath | None = None
    entry_point: EntryPoint | None = Field(
        default=None, description="'package.module:function' returning a torch.nn.Module"
    )
    weights: LocalPath | None = Field(
        default=None,
        description="a safetensors file loaded strictly into the module 'entry_point' returns",
    )
    hf: LocalPath | None = Field(
        default=None,
        description="a local Hugging Face model directory (config.json and weights), loaded "
        "with transformers from this directory only: nothing is downloaded, no remote code runs",
    )
    task: HfTask | None = Field(default=None, description="what the 'hf' model is used for")
    registered: RegisteredUri | None = Field(
        default=None, description="'models:/NAME/VERSION' or 'models:/NAME@ALIAS'"
    )
    fixed_batch: int | None = Field(
        default=None,
        ge=1,
        le=MAX_FIXED_BATCH,
        description="the only batch size the model takes (a model that fails on any other); "
        "default: any, or what an ONNX model's inputs declare",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        sources = (self.onnx, self.entry_point, self.hf, self.registered)
        if sum(s is not None for s in sources) != 1:
            raise ValueError("give exactly one of 'onnx', 'entry_point', 'hf' or 'registered'")
        if self.weights is not None and self.entry_point is None:
            raise ValueError("'weights' is allowed only together with 'entry_point'")
        if (self.hf is None) != (self.task is None):
            raise ValueError("'task' is required with 'hf' and allowed only with it")
        return self


# The largest magnitude of a number given as a constant input: finite, as every number of a
# request is.
MAX_CONSTANT = 1e15
ConstantValue = (
    Annotated[int, Field(ge=-MAX_CONSTANT, le=MAX_CONSTANT)]
    | Annotated[float, Field(ge=-MAX_CONSTANT, le=MAX_CONSTANT)]
    | list[Any]
)


class DataRef(Strict):
    """Evaluation data: an .npz with arrays 'inputs' (and 'labels'), an entry point returning
    (inputs, labels) as numpy arrays (labels may be None), or, for a Hugging Face model, text
    lines or a directory of images prepared by the model's own tokenizer or image processor,
    with labels (one integer a line) where there are any."""

    npz: LocalPath | None = None
    entry_point: EntryPoint | None = None
    text: LocalPath | None = Field(
        default=None, description="a UTF-8 text file, one sample a line (blank lines skipped)"
    )
    sequence_length: int | None = Field(
        default=None, ge=1, le=8192, description="tokens per 'text' sample; default 128"
    )
    images: LocalPath | None = Field(
        default=None, description="a directory of images (.png, .jpg, .jpeg, .bmp, .webp)"
    )
    labels: LocalPath | None = Field(
        default=None, description="for 'text' or 'images': one integer label a line, in order"
    )
    constants: dict[str, ConstantValue] = Field(
        default_factory=dict,
        description="inputs fed the same value for every batch, by input name (e.g. a sample "
        "rate: {sr: 16000}); a number or a nested list, cast to the input's type",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> DataRef:
        sources = (self.npz, self.entry_point, self.text, self.images)
        if sum(s is not None for s in sources) != 1:
            raise ValueError("give exactly one of 'npz', 'entry_point', 'text' or 'images'")
        if self.sequence_length is not None and self.text is None:
            raise ValueError("'sequence_length' is allowed only together with 'text'")
        if self.labels is not None and self.text is None and self.images is None:
            raise ValueError("'labels' is allowed only together with 'text' or 'images'")
        return self


class MetricRef(Strict):
    """How accuracy is judged: top-1 accuracy against labels, fidelity (mean cosine
    similarity to the unmodified model's outputs), agreement (the share of samples whose
    top-1 class is the unmodified model's), or a user function
    `f(outputs, labels, reference_outputs) -> float` (higher is better)."""

    kind: Literal["accuracy", "fidelity", "agreement", "custom"] = "accuracy"
    entry_point: EntryPoint | None = None
    output: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="of a model with several outputs, the one judged (by default fidelity "
        "takes the mean over all of them; accuracy and agreement need one named)",
    )

    @model_validator(mode="after")
    def _entry_point_iff_custom(self) -> MetricRef:
        if (self.kind == "custom") != (self.entry_point is not None):
            raise ValueError("'entry_point' is required for kind 'custom' and only for it")
        return self


ContentionPolicy = Literal["wait", "warn", "fail"]
