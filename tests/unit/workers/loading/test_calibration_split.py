"""The request's samples split once, the same way every time, into evaluation data and the
calibration samples held out of it: static int8 never calibrates on a sample that judges it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.core.contract import DataRef, ModelRef
from workers.loading.workloads import (
    MAX_CALIBRATION_SAMPLES,
    MIN_SPLIT_SAMPLES,
    calibration_count,
    load_data,
    split_calibration,
)


def numbered(n: int) -> np.ndarray:
    """Samples whose single value is their index, so where each went can be read off."""
    return np.arange(n, dtype=np.float32).reshape(n, 1)


@pytest.mark.parametrize(
    ("n", "fixed_batch", "held"),
    [
        (MIN_SPLIT_SAMPLES - 1, None, 0),  # too few to calibrate on and still judge by
        (MIN_SPLIT_SAMPLES, None, MIN_SPLIT_SAMPLES // 8),
        (450, None, 56),
        (100_000, None, MAX_CALIBRATION_SAMPLES),
        (100, 32, 32),  # one fixed batch, more than one in eight
        (64, 64, 32),  # never more than half
    ],
)
def test_how_many_are_held_out(n: int, fixed_batch: int | None, held: int) -> None:
    assert calibration_count(n, fixed_batch) == held


@pytest.mark.parametrize("n", [MIN_SPLIT_SAMPLES, 450, 5000])
def test_calibration_samples_are_never_evaluated(n: int) -> None:
    labels = np.arange(n) * 10
    data = split_calibration(numbered(n), labels, "data.npz")
    evaluated = set(data.inputs[:, 0].astype(int))
    calibrating = set(data.calibration_inputs[:, 0].astype(int))
    assert len(calibrating) == calibration_count(n) > 0
    assert not evaluated & calibrating
    assert evaluated | calibrating == set(range(n))
    assert data.labels is not None and list(data.labels) == [10 * i for i in sorted(evaluated)]
    assert data.n_samples == n - calibration_count(n)


def test_the_held_out_samples_are_spread_over_the_data_and_always_the_same() -> None:
    """Data sorted by class (ten classes of 100) calibrates on every class, evaluates every
    class, and keeps its first sample in the evaluation."""
    classes = np.repeat(np.arange(10), 100)
    first = split_calibration(numbered(1000), classes, "data.npz")
    again = split_calibration(numbered(1000), classes, "data.npz")
    assert np.array_equal(first.calibration_inputs, again.calibration_inputs)
    held = first.calibration_inputs[:, 0].astype(int)
    assert set(classes[held]) == set(range(10))
    assert first.labels is not None and set(first.labels) == set(range(10))
    assert first.inputs[0, 0] == 0


def test_structured_inputs_split_by_sample() -> None:
    n = 80
    records = np.zeros(n, dtype=[("ids", np.int64, (3,)), ("mask", np.int64, (3,))])
    records["ids"][:, 0] = np.arange(n)
    data = split_calibration(records, None, "data.npz")
    evaluated = set(data.inputs["ids"][:, 0])
    calibrating = set(data.calibration_inputs["ids"][:, 0])
    assert data.calibration_inputs.dtype == records.dtype and calibrating
    assert not evaluated & calibrating and len(evaluated | calibrating) == n


def test_loaded_data_holds_its_calibration_samples_out(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez(path, inputs=numbered(200), labels=np.arange(200))
    data = load_data(DataRef(npz=str(path)), [], ModelRef(entry_point="m:f"))
    assert len(data.calibration_inputs) == calibration_count(200) == 25
    assert not set(data.inputs[:, 0]) & set(data.calibration_inputs[:, 0])
    fixed = load_data(DataRef(npz=str(path)), [], ModelRef(entry_point="m:f", fixed_batch=32))
    assert len(fixed.calibration_inputs) == 32
