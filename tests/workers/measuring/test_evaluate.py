from __future__ import annotations

import numpy as np
import pytest

from workers.measuring.evaluate import (
    fidelity,
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
    reference = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0], [0.0, 0.0]])
    assert fidelity(reference, reference) == pytest.approx(1.0)
    assert fidelity(-reference[:3], reference[:3]) == pytest.approx(-1.0)
    rotated = np.array([[0.0, 1.0], [2.0, 0.0], [-4.0, 3.0], [0.0, 0.0]])
    assert fidelity(rotated, reference) == pytest.approx(0.25)  # three orthogonal, two zeros


def test_fidelity_flattens_each_sample() -> None:
    reference = np.arange(24, dtype=np.float32).reshape(2, 3, 4) + 1
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
