"""`Predictor.predict` does no per-call work that the load already did: a batch that fits one
session call is passed to the session as it is, and a contiguous input of the model's type
and shape reaches the engine without a copy or a re-check of its shape and type."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.core.errors import Unsupported
from autotune.core.knobs.config import parse_config
from workers.loading import feeds
from workers.loading.feeds import InputSpec, batch_axes, feed, packed_outputs
from workers.predictor import Predictor

INPUTS, OUTPUTS = batch_axes(
    [InputSpec("images", np.float32, (None, 1, 8, 8))],
    [InputSpec("logits", np.float32, (None, 10))],
)


class RecordingSession:
    """A session that keeps every batch it was given and answers with fresh outputs."""

    def __init__(self, fixed_batch: int | None = None) -> None:
        self.fixed_batch = fixed_batch
        self.inputs, self.outputs = INPUTS, OUTPUTS
        self.batches: list[np.ndarray] = []
        self.answers: list[np.ndarray] = []

    def run(self, batch: np.ndarray) -> np.ndarray:
        self.batches.append(batch)
        self.answers.append(np.full((batch.shape[0], 10), float(len(self.answers)), np.float32))
        return self.answers[-1]


def predictor(session: RecordingSession, batch_size: int) -> Predictor:
    return Predictor(session, parse_config({"batch.size": batch_size}, "onnx"))


def images(count: int) -> np.ndarray:
    return np.arange(count * 64, dtype=np.float32).reshape(count, 1, 8, 8)


@pytest.mark.parametrize("count", [1, 5, 8])
def test_a_batch_that_fits_one_call_is_passed_and_answered_as_it_is(count: int) -> None:
    session = RecordingSession()
    given = images(count)
    outputs = predictor(session, batch_size=8).predict(given)
    assert session.batches == [given] and session.batches[0] is given
    assert outputs is session.answers[0]


def test_a_fixed_batch_model_given_its_batch_runs_it_in_one_call() -> None:
    session = RecordingSession(fixed_batch=4)
    given = images(4)
    assert predictor(session, batch_size=4).predict(given) is session.answers[0]
    assert session.batches[0] is given


def test_more_inputs_than_a_batch_are_still_run_in_batches_and_joined() -> None:
    session = RecordingSession()
    outputs = predictor(session, batch_size=4).predict(images(10))
    assert [b.shape[0] for b in session.batches] == [4, 4, 2]
    assert outputs.shape == (10, 10)
    assert outputs[:, 0].tolist() == [0.0] * 4 + [1.0] * 4 + [2.0] * 2


def test_a_contiguous_batch_of_the_inputs_type_is_fed_without_a_copy_or_a_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = []
    monkeypatch.setattr(feeds, "_fits", lambda *a: checks.append(a) or True)
    monkeypatch.setattr(feeds.np, "can_cast", lambda *a, **k: checks.append(a) or True)
    given = images(3)
    fed = feed(given, INPUTS)
    assert fed["images"] is given
    assert checks == []


def test_a_single_output_comes_back_as_the_engine_gave_it() -> None:
    logits = np.zeros((3, 10), np.float32)
    assert packed_outputs(OUTPUTS, [logits], 3) is logits


def test_an_input_of_another_type_or_shape_is_still_cast_or_refused() -> None:
    as_doubles = images(2).astype(np.float64)
    fed = feed(as_doubles, INPUTS)["images"]
    assert fed.dtype == np.float32 and np.array_equal(fed, as_doubles)
    with pytest.raises(Unsupported, match=r"'images' \(float32 \[\?, 1, 8, 8\]\) does not fit"):
        feed(np.zeros((2, 1, 8, 9), np.float32), INPUTS)


def test_a_lone_output_is_not_rebuilt_into_its_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils import _pytree

    from workers import predictor as module

    monkeypatch.setattr(module, "rebuilt", lambda *a: pytest.fail("rebuilt per call"))
    session = RecordingSession()
    session.output_structure = _pytree.tree_structure(object())  # type: ignore[attr-defined]
    given = images(2)
    assert predictor(session, batch_size=4).predict(given) is session.answers[0]


def test_a_lone_torch_output_is_read_without_flattening(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from workers.building import torch_io

    monkeypatch.setattr(torch_io, "_named_tensors", lambda *a: pytest.fail("flattened per call"))
    output = torch.arange(6.0).reshape(2, 3)
    reader = torch_io.TorchOutputs()
    assert np.array_equal(reader.numpy(output, 2), output.numpy())
    assert reader.structure is None


def test_a_torch_call_without_an_sdpa_backend_enters_inference_mode_alone() -> None:
    import torch

    from workers.building.torch_kernels import TorchKernels

    context = TorchKernels(torch.get_num_threads()).applied()
    assert isinstance(context, torch.inference_mode)
    with context:
        assert torch.is_inference_mode_enabled()
