"""Hugging Face model directories as workloads: loaded with transformers from the directory
alone, judged on text or images prepared by the model's own tokenizer or image processor,
measured on every engine, and refused with the field at fault when model and data do not go
together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.core.contract import DataRef, MetricRef, ModelRef, Workload
from autotune.core.errors import RequestError
from tests.conftest import REPO
from tests.hf_models import (
    SENTENCES,
    bert_directory,
    image_directory,
    text_file,
    vit_directory,
)
from tests.workers_support import spec_for
from workers import export_artifact, inspect_workload, run_trial
from workers.cache import WorkloadCache
from workers.predictor import load_predictor


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bert_directory(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bert_directory(tmp_path_factory.mktemp("bert-classifier"), classes=3)


@pytest.fixture(scope="module")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return text_file(tmp_path_factory.mktemp("text") / "lines.txt")


def workload(model: ModelRef, data: DataRef, metric: str = "fidelity") -> Workload:
    return Workload(model=model, data=data, metric=MetricRef(kind=metric))  # type: ignore[arg-type]


def embeddings_workload(encoder: Path, sentences: Path, length: int = 16) -> Workload:
    return workload(
        ModelRef(hf=str(encoder), task="feature-extraction"),
        DataRef(text=str(sentences), sequence_length=length),
    )


def test_text_is_tokenized_by_the_models_tokenizer_to_the_sequence_length(
    encoder: Path, sentences: Path
) -> None:
    from transformers import AutoTokenizer

    loaded = WorkloadCache().get(embeddings_workload(encoder, sentences, length=12))
    expected = AutoTokenizer.from_pretrained(str(encoder))(
        SENTENCES, padding="max_length", truncation=True, max_length=12
    )["input_ids"]
    assert loaded.data.inputs.dtype == np.int64
    assert loaded.data.inputs.tolist() == expected
    assert loaded.data.labels is None and loaded.data.field == "data.text"


def test_embeddings_are_mean_pooled_over_the_real_tokens(encoder: Path, sentences: Path) -> None:
    """The padding a sequence length adds does not change a sentence's embedding."""
    from transformers import AutoModel, AutoTokenizer

    short = WorkloadCache().get(embeddings_workload(encoder, sentences, length=12))
    long = WorkloadCache().get(embeddings_workload(encoder, sentences, length=40))
    with torch.no_grad():
        first = short.model.module(torch.from_numpy(short.data.inputs)).numpy()
        second = long.model.module(torch.from_numpy(long.data.inputs)).numpy()
        tokens = AutoTokenizer.from_pretrained(str(encoder))(SENTENCES[:1], return_tensors="pt")
        hidden = AutoModel.from_pretrained(str(encoder))(**tokens).last_hidden_state
    assert first.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(first, second, atol=1e-5)
    np.testing.assert_allclose(first[0], hidden[0].mean(0).numpy(), atol=1e-5)


@pytest.mark.parametrize(
    "config",
    [
        {"runtime.engine": "torch_eager", "batch.size": 4},
        {"runtime.engine": "onnxruntime", "precision.mode": "int8_dynamic", "batch.size": 2},
        {"runtime.engine": "torch_eager", "prune.method": "magnitude", "prune.ratio": 0.3},
    ],
    ids=["eager", "onnxruntime-int8", "pruned"],
)
def test_an_embedding_model_is_measured_on_each_engine(
    encoder: Path, sentences: Path, config: dict
) -> None:
    result = run_trial(spec_for(embeddings_workload(encoder, sentences), config), WorkloadCache())
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy > 0.9


def test_a_classifier_is_judged_against_labels_or_by_agreement(
    classifier: Path, sentences: Path, tmp_path: Path
) -> None:
    model = ModelRef(hf=str(classifier), task="text-classification")
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(str(i % 3) for i in range(len(SENTENCES))) + "\n")
    labelled = workload(model, DataRef(text=str(sentences), labels=str(labels)), "accuracy")
    info = inspect_workload(labelled, WorkloadCache())
    assert info.has_labels and info.input_shape == [64]  # the model's longest, under 128
    agreed = workload(model, DataRef(text=str(sentences)), "agreement")
    result = run_trial(spec_for(agreed, {"runtime.engine": "onnxruntime"}), WorkloadCache())
    assert result.status == "ok", result.reason
    assert result.metrics is not None and result.metrics.accuracy == 1.0


def test_an_image_classifier_takes_its_processors_pixels(tmp_path: Path) -> None:
    model = ModelRef(hf=str(vit_directory(tmp_path / "vit")), task="image-classification")
    images = image_directory(tmp_path / "images", count=4)
    loaded = WorkloadCache().get(workload(model, DataRef(images=str(images)), "agreement"))
    assert loaded.data.inputs.shape == (4, 3, 32, 32)
    assert loaded.data.inputs.dtype == np.float32
    result = run_trial(spec_for(loaded.workload, {"batch.size": 2}), WorkloadCache())
    assert result.status == "ok", result.reason


def test_a_tuned_hf_artifact_reloads_as_measured(
    encoder: Path, sentences: Path, tmp_path: Path
) -> None:
    config = {"runtime.engine": "torch_eager", "prune.method": "magnitude", "prune.ratio": 0.3}
    spec = spec_for(embeddings_workload(encoder, sentences), config)
    trial = run_trial(spec, WorkloadCache())
    export_artifact(spec, str(tmp_path / "out"), WorkloadCache())
    inputs = WorkloadCache().get(spec.workload).data.inputs
    with load_predictor(str(tmp_path / "out")) as predictor:
        outputs = predictor.predict(inputs)
    assert outputs.shape == (len(SENTENCES), 32)
    assert trial.metrics is not None and trial.metrics.accuracy > 0.9


@pytest.mark.parametrize(
    ("model", "data", "field", "rule"),
    [
        ({"hf": "missing", "task": "feature-extraction"}, "text", "model.hf", "config.json"),
        ({"entry_point": "experiments.digits.model:build_model"}, "text", "data.text",
         "needs a Hugging Face model"),
        ({"hf": "ENCODER", "task": "feature-extraction"}, "labels", "data.labels",
         "one label for each of the 6 samples"),
        ({"hf": "ENCODER", "task": "feature-extraction"}, "blank", "data.text",
         "at least one non-blank line"),
        ({"hf": "ENCODER", "task": "feature-extraction"}, "too long", "data.sequence_length",
         "at most the model's 64 positions"),
    ],
)  # fmt: skip
def test_a_model_and_data_that_do_not_go_together_are_refused_before_any_trial(
    encoder: Path,
    sentences: Path,
    tmp_path: Path,
    model: dict,
    data: str,
    field: str,
    rule: str,
) -> None:
    if model.get("hf") == "ENCODER":
        model = {**model, "hf": str(encoder)}
    labels = tmp_path / "labels.txt"
    labels.write_text("0\n1\n")
    refs = {
        "text": DataRef(text=str(sentences)),
        "labels": DataRef(text=str(sentences), labels=str(labels)),
        "blank": DataRef(text=str(text_file(tmp_path / "blank.txt", ["", "  "]))),
        "too long": DataRef(text=str(sentences), sequence_length=65),
    }
    bad = Workload(
        model=ModelRef(**model), data=refs[data], metric=MetricRef(kind="fidelity"),
        python_path=[str(REPO)],
    )  # fmt: skip
    with pytest.raises(RequestError) as raised:
        inspect_workload(bad, WorkloadCache())
    assert raised.value.field == field
    assert rule in raised.value.rule
