"""experiments/time_to_answer.py: the detector workload it builds, and how it reads a study
(time to within 5% of the final throughput, trials by status). No timing is asserted."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.core.contract import Contention, Provenance, TrialStatus
from autotune.requests.request import TuningRequest
from autotune.results.records import TrialMarks, TrialRecord, TrialState
from experiments import detector as det
from experiments import time_to_answer as tta
from tests.conftest import FAST_MEASUREMENT, FAST_VALIDATION

START = datetime(2026, 12, 3, 12, 0, 0)  # the process start the times are measured from


@pytest.fixture(scope="module")
def model() -> det.Detector:
    return det.build_detector()


def test_detector_takes_320x320_rgb_and_has_a_few_million_parameters(model: det.Detector) -> None:
    assert 1_000_000 <= det.parameter_count(model) <= 6_000_000
    images = torch.from_numpy(det.synthetic_images(1, seed=3))
    assert images.shape == (1, 3, 320, 320)
    with torch.no_grad():
        predictions = model(images)
    # 3 anchors in each cell of the 40x40, 20x20 and 10x10 grids; box, objectness, 20 classes
    assert predictions.shape == (1, 3 * (40 * 40 + 20 * 20 + 10 * 10), 5 + 20)
    assert torch.isfinite(predictions).all()
    assert predictions.std() > 0.1  # the calibrated batch norms keep the signal alive


def test_onnx_export_matches_torch_at_batch_1_and_2(model: det.Detector, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    path = det.export_detector(tmp_path / "detector.onnx")  # rebuilt from the same seed
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    [model_input] = session.get_inputs()
    assert model_input.shape[1:] == [3, 320, 320]
    assert not isinstance(model_input.shape[0], int)  # the batch axis is dynamic
    images = det.synthetic_images(2, seed=7)
    for batch in (images[:1], images):
        [actual] = session.run(None, {model_input.name: batch})
        with torch.no_grad():
            expected = model(torch.from_numpy(batch)).numpy()
        assert actual.shape == (len(batch), det.ANCHORS_TOTAL, 25)
        np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)


def test_detector_data_is_seeded_float_images_in_the_unit_range(tmp_path: Path) -> None:
    path = det.write_detector_data(tmp_path / "detector.npz", n=3, seed=1)
    with np.load(path) as npz:
        assert npz.files == ["inputs"]
        images = npz["inputs"]
    assert images.shape == (3, 3, 320, 320) and images.dtype == np.float32
    assert images.min() >= 0.0 and images.max() <= 1.0 and images.std() > 0.05
    np.testing.assert_array_equal(images, det.synthetic_images(3, seed=1))
    assert not np.array_equal(images, det.synthetic_images(3, seed=2))


def _trial(
    number: int,
    ended_s: float | None,
    status: TrialStatus | None = "ok",
    throughput: float | None = None,
    drop_violation: float = -0.005,
    baseline: bool = False,
    started_s: float | None = None,
    contended: bool | None = None,
) -> tta.Trial:
    state: TrialState
    if status is None:
        state = "running"
    elif throughput is not None:
        state = "complete"
    else:
        state = "pruned"
    record = TrialRecord(
        number=number,
        state=state,
        config={},
        marks=TrialMarks(baseline=baseline),
        status=status,
        metrics=None if throughput is None else {"accuracy": 0.98, tta.THROUGHPUT: throughput},
        violations={"accuracy_drop": drop_violation},
        ended_at=None if ended_s is None else START + timedelta(seconds=ended_s),
        provenance=None
        if contended is None
        else Provenance.model_construct(contention=Contention.model_construct(contended=contended)),
    )
    started = None if started_s is None else START + timedelta(seconds=started_s)
    return tta.Trial(record, started)


# Listed by number; they ended in another order. The final choice's throughput is 200.
TRIALS = [
    _trial(0, 10.0, throughput=100.0, baseline=True, started_s=4.0, contended=True),
    _trial(1, 20.0, throughput=300.0, drop_violation=0.02, started_s=10.5),  # infeasible
    _trial(2, 25.0, status="skipped", started_s=20.5),
    _trial(3, 60.0, throughput=200.0, started_s=50.5),  # the final choice, ended last
    _trial(4, 40.0, throughput=180.0, started_s=25.5, contended=False),  # below 95% of 200
    _trial(5, 50.0, throughput=192.0, started_s=40.5),  # within 5%: the answer is known
    _trial(6, 52.0, status="too_slow", started_s=50.2),
    _trial(7, 53.0, status="error", started_s=52.5),
    _trial(8, None, status=None, started_s=60.5),  # still running when the CLI ended
]


def test_time_to_within_5_percent_counts_only_feasible_measured_trials_in_end_order() -> None:
    assert tta.time_to_within(TRIALS, final=200.0, started=START) == 50.0
    assert tta.time_to_within(TRIALS, final=200.0, started=START, share=0.0) == 60.0
    assert tta.time_to_within(TRIALS, final=101.0, started=START) == 10.0  # the baseline
    assert tta.time_to_within(TRIALS, final=1000.0, started=START) is None
    assert tta.time_to_within([], final=200.0, started=START) is None
    assert tta.trial_throughput(TRIALS, 3) == 200.0
    assert tta.trial_throughput(TRIALS, 2) is None  # skipped: never measured


def test_status_counts_and_the_trials_start_times() -> None:
    assert tta.status_counts(TRIALS) == Counter(
        {"ok": 5, "skipped": 1, "too_slow": 1, "error": 1, "running": 1}
    )
    assert tta.contended_count(TRIALS) == 1
    assert tta.first_trial_s(TRIALS, START) == 4.0
    assert tta.baseline_trial_s(TRIALS) == 6.0
    assert tta.baseline_trial_s(TRIALS[1:]) is None
    assert tta._statuses(tta.status_counts(TRIALS)) == (
        "5 ok, 1 skipped, 1 too_slow, 1 error, 1 running"
    )


def test_headline_interval_is_read_from_the_tuned_file() -> None:
    tuned = {
        "headline": {
            "text": "2× throughput",
            "ratios": {tta.THROUGHPUT: {"ratio": 2.0, "ci_low": 1.8, "ci_high": 2.3}},
            "rounds": 10,
            "contended_rounds": 0,
            "conditions": "quiet",
            "same_as_baseline": False,
        }
    }
    read = tta.throughput_interval(tuned)
    assert (read["ratio"], read["ci"], read["same_as_baseline"]) == (2.0, [1.8, 2.3], False)


def test_rounds_alternate_the_revisions() -> None:
    a = tta.Revision("a", Path("/a"), "a")
    b = tta.Revision("b", Path("/b"), "b")
    assert [(r, rev.label) for r, rev in tta.orders([a, b], 3)] == [
        (1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b"),
    ]  # fmt: skip


def test_every_workload_gets_the_same_valid_request(tmp_path: Path) -> None:
    [digits] = [w for w in tta.WORKLOADS if w.name == "digits"]
    request = tta.request_for(digits, digits.prepare(tmp_path), trials=16)
    parsed = TuningRequest.model_validate(request)
    assert parsed.objectives == ["accuracy", "throughput"]
    assert parsed.selection.strategy == "highest_throughput"
    assert parsed.budget.trials == 16
    assert parsed.search_space is None  # the default space for the hardware
    assert parsed.storage == "sqlite:///autotune.db"  # under each run's own directory


@pytest.mark.slow
def test_a_tiny_real_run_is_read_back(tmp_path: Path) -> None:
    """digits, 3 trials with short measurements, through the CLI on this tree."""
    [digits] = [w for w in tta.WORKLOADS if w.name == "digits"]
    revision = tta.Revision("this revision", tta.REPO, "test")
    extra = {"measurement": FAST_MEASUREMENT, "validation": FAST_VALIDATION}
    folder = tmp_path / "run"
    result = tta.run_once(digits, digits.prepare(tmp_path), revision, 1, 3, folder, extra)
    assert result.exit == 0, (folder / "cli.log").read_text()[-3000:]
    assert result.error is None
    assert sum(result.statuses.values()) == 3 and result.statuses["ok"] >= 1
    assert result.final_throughput is not None and result.final_throughput > 0
    assert result.chosen_trial is not None and result.chosen_trial_throughput is not None
    assert result.first_trial_s is not None and result.to_within_s is not None
    assert result.baseline_trial_s is not None and result.baseline_trial_s > 0
    # one clock: the trials' times fall inside the process's lifetime
    assert 0 < result.first_trial_s < result.to_within_s < result.wall_s
    assert result.headline is not None and result.headline["rounds"] == 6
