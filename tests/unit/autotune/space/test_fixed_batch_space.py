"""A model whose inputs (or the request) fix the batch size gets a space whose batch size is
that size alone, and the space says why the file's other sizes are left out."""

from __future__ import annotations

import optuna
import pytest

from autotune.core.contract import ModelInfo
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR, effective_space, load_space

SPACE = SPACES_DIR / "cpu.yaml"


def onnx_model(fixed_batch: int | None, fixed_by: str | None = "inputs") -> ModelInfo:
    return ModelInfo(
        kind="onnx",
        sha256="0" * 64,
        n_samples=10,
        input_shape=[1, 64, 200],
        has_labels=True,
        parameter_bytes=4096,
        activation_bytes_per_sample=1024,
        fixed_batch=fixed_batch,
        fixed_batch_by=None if fixed_batch is None else fixed_by,  # type: ignore[arg-type]
    )


def batch_sizes(
    fixed_batch: int | None, fixed_by: str = "inputs"
) -> tuple[list[list[object]], list[object], list[str]]:
    profile = load_profile(SPACES_DIR / "profiles" / "cpu-only.json")
    model = onnx_model(fixed_batch, fixed_by)
    space = effective_space(load_space(SPACE), profile, str(SPACE), model)
    batch = [d for d in space.dimensions if d.name == "batch.size"]
    excluded = [e for e in space.excluded if e.dimension == "batch.size"]
    reasons = [e.reason for e in excluded]
    return [d.values or [] for d in batch], [d.baseline for d in batch], reasons


@pytest.mark.parametrize("fixed", [1, 3])  # 3: a size the file does not list
def test_a_fixed_batch_is_the_only_batch_size(fixed: int) -> None:
    values, baselines, reasons = batch_sizes(fixed)
    assert values == [[fixed]] and baselines == [fixed]
    assert reasons and set(reasons) == {
        f"the model takes only batches of {fixed} (its inputs fix the batch dimension)"
    }


def test_a_batch_the_request_fixes_is_said_to_be_the_requests() -> None:
    values, _, reasons = batch_sizes(1, fixed_by="request")
    assert values == [[1]]
    assert set(reasons) == {"the model takes only batches of 1 (the request's model.fixed_batch)"}


def test_a_dynamic_batch_keeps_the_files_sizes() -> None:
    values, baselines, reasons = batch_sizes(None)
    assert values == [[1, 2, 4, 8, 16, 32, 64, 128]] and baselines == [1]
    assert reasons == []


def test_a_study_begun_on_the_files_batch_sizes_samples_the_fixed_one() -> None:
    """Optuna keeps one distribution per parameter name in a study: the fixed batch size is
    sampled under a name of its own, so a study whose trials ran before goes on."""
    profile = load_profile(SPACES_DIR / "profiles" / "cpu-only.json")
    study = optuna.create_study()
    for fixed_batch in (None, 1):
        space = effective_space(load_space(SPACE), profile, str(SPACE), onnx_model(fixed_batch))
        trial = study.ask()
        config = space.sample(trial)
        study.tell(trial, 0.0)
    assert config["batch.size"] == 1
    assert "batch.size[1]" in study.trials[-1].params
