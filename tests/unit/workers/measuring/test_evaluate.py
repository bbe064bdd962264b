from __future__ import annotations

import numpy as np
import pytest

from workers.measuring.evaluate import (
    MIN_COSINE_VALUES,
    fidelity,
    fidelity_form,
    hoeffding_slack,
    run_all,
    subset_size,
    tile_batch,
    top1_accuracy,
)


def test_top1_accuracy() -> None:
    outputs = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert top1_accuracy(outputs, np.array([1, 0, 0, 0])) == 0.75


def test_top1_accuracy_refuses_outputs_without_a_class_axis() -> None:
    with pytest.raises(ValueError, match="classes"):
        top1_accuracy(np.zeros(4), np.zeros(4, dtype=np.int64))


def test_fidelity_is_the_mean_cosine_similarity() -> None:
    pairs = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0], [0.0, 0.0]])
    reference = np.tile(pairs, (1, MIN_COSINE_VALUES // 2))  # long enough for a cosine
    assert fidelity(reference, reference) == pytest.approx(1.0)
    assert fidelity(-reference[:3], reference[:3]) == pytest.approx(-1.0)
    turned = np.array([[0.0, 1.0], [2.0, 0.0], [-4.0, 3.0], [0.0, 0.0]])
    rotated = np.tile(turned, (1, MIN_COSINE_VALUES // 2))
    assert fidelity(rotated, reference) == pytest.approx(0.25)  # three orthogonal, two zeros


def test_fidelity_sees_a_change_of_a_one_value_output() -> None:
    """A probability near 0.002 a sample: the cosine of one-value vectors is their sign, so
    every positive output would score 1; the error form sees the change."""
    rng = np.random.default_rng(0)
    reference = rng.uniform(0.001, 0.003, (64, 1))
    assert fidelity(reference, reference) == pytest.approx(1.0)
    assert fidelity(np.full_like(reference, 0.9), reference) == pytest.approx(-1.0)
    near = reference * (1 + rng.normal(0, 0.01, reference.shape))  # 1% noise
    assert 0.999 < fidelity(near, reference) < 1.0
    off = reference * 1.5  # half as much again: squared error a quarter of the scale
    assert fidelity(off, reference) == pytest.approx(0.75, abs=0.05)
    assert "1 value a sample): 1 - squared error" in fidelity_form(reference)


def test_fidelity_of_a_few_logits_is_not_blind_to_scale() -> None:
    reference = np.array([[2.0, -1.0], [0.5, 1.5], [-1.0, 0.0]])
    assert fidelity(reference * 3, reference) < 0  # a cosine would call it 1.0
    assert "cosine" in fidelity_form(np.zeros((2, MIN_COSINE_VALUES)))


def test_fidelity_flattens_each_sample() -> None:
    reference = np.arange(24, dtype=np.float32).reshape(2, 3, 4) + 1  # 12 values a sample
    assert fidelity(reference * 3, reference) == pytest.approx(1.0)


class FixedBatchDoubler:
    fixed_batch = 4

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def run(self, batch: np.ndarray) -> np.ndarray:
        self.batch_sizes.append(batch.shape[0])
        assert batch.shape[0] == self.fixed_batch
        return batch * 2


def test_run_all_pads_the_last_batch_of_a_fixed_batch_model() -> None:
    session = FixedBatchDoubler()
    inputs = np.arange(10, dtype=np.float32).reshape(10, 1)
    np.testing.assert_array_equal(run_all(session, inputs), inputs * 2)
    assert session.batch_sizes == [4, 4, 4]


def test_run_all_keeps_order_with_a_dynamic_batch() -> None:
    class Identity:
        fixed_batch = None

        def run(self, batch: np.ndarray) -> np.ndarray:
            return batch.copy()

    inputs = np.arange(150, dtype=np.float32).reshape(150, 1)
    np.testing.assert_array_equal(run_all(Identity(), inputs, batch_size=64), inputs)


def test_tile_batch_cycles_through_the_inputs() -> None:
    inputs = np.arange(3).reshape(3, 1)
    np.testing.assert_array_equal(tile_batch(inputs, 7)[:, 0], [0, 1, 2, 0, 1, 2, 0])
    np.testing.assert_array_equal(tile_batch(inputs, 2)[:, 0], [0, 1])


def test_a_subset_is_an_eighth_of_the_data_and_at_least_64_samples() -> None:
    assert subset_size(127) is None  # too few to judge a part of
    assert subset_size(128) == 64
    assert subset_size(450) == 64
    assert subset_size(8000) == 1000


@pytest.mark.parametrize(
    ("sample_range", "samples", "confidence", "slack"),
    [
        (1.0, 64, 0.99, 0.1897),  # sqrt(ln(100) / 128)
        (2.0, 64, 0.99, 0.3794),  # a cosine per sample: twice the range
        (1.0, 1000, 0.99, 0.0480),
        (1.0, 64, 0.9, 0.1341),
    ],
)
def test_hoeffding_slack(
    sample_range: float, samples: int, confidence: float, slack: float
) -> None:
    assert hoeffding_slack(sample_range, samples, confidence) == pytest.approx(slack, abs=1e-4)


def test_class_scores_are_probabilities_or_a_known_classifier_s_rows() -> None:
    """An embedding is rows of floats too: only probabilities (or log-probabilities), or the
    rows of a model known to classify, are taken for class scores."""
    from workers.measuring.evaluate import looks_like_class_scores

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 5))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    embeddings = np.abs(logits) / np.linalg.norm(logits, axis=1, keepdims=True)
    assert looks_like_class_scores(probabilities)
    assert looks_like_class_scores(np.log(probabilities))
    assert not looks_like_class_scores(embeddings)
    assert not looks_like_class_scores(logits)
    assert looks_like_class_scores(logits, classifier=True)
    assert not looks_like_class_scores(probabilities[:, :1], classifier=True)
