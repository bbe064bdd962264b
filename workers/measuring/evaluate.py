"""Quality metrics (higher is better) and batched inference over the evaluation data.

Accuracy is a property of the variant, so it is always computed with the same batching
(`EVAL_BATCH_SIZE`, or the model's fixed batch size), never the trial's batch size: dynamic
int8 quantization picks activation scales per batch, so batch composition changes outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from autotune.core.contract import MetricRef
from autotune.core.errors import RequestError
from autotune.core.model_files import resolve_entry_point
from workers.building.runtimes import Session

EVAL_BATCH_SIZE = 64

Score = Callable[[np.ndarray, np.ndarray | None, np.ndarray | None], float]


@dataclass(frozen=True)
class VariantQuality:
    """A model variant's accuracy (the request's quality metric) and what else was measured
    of its quality (`autotune.core.metrics.variant_quality`: top-1 agreement, how the
    accuracy was judged), by TrialMetrics field."""

    accuracy: float
    figures: Mapping[str, float | str] = field(default_factory=dict)


@dataclass(frozen=True)
class QualityMetric:
    kind: str
    needs_labels: bool
    needs_reference: bool
    score: Score
    # The width of the range one sample's score lies in, for a metric that is the mean of
    # per-sample scores (a subset's figure then has a distribution-free interval); None for a
    # metric that is not known to be one (a custom metric).
    sample_range: float | None = None
    output: str | None = None  # of a model with several outputs, the one judged
    entry_point: str | None = None  # a custom metric's

    def judged(self, outputs: np.ndarray) -> np.ndarray:
        """The outputs this metric judges: `output` of several, else all of them."""
        names = outputs.dtype.names
        if self.output is None or names is None:
            return outputs
        if self.output not in names:
            raise ValueError(
                f"metric.output {self.output!r} is not an output of the model ({', '.join(names)})"
            )
        return outputs[self.output]

    def judged_by(self, reference: np.ndarray, left_out: Mapping[str, str] | None = None) -> str:
        """How this metric judges the model whose unmodified outputs are `reference`, in words
        (the tuned file's `accuracy_judged_by`), and which of its outputs it cannot judge and
        why (`left_out`: the session's `outputs_left_out`)."""
        told = self._judged_by(reference)
        if not left_out:
            return told
        reasons = "; ".join(f"'{name}' {reason}" for name, reason in left_out.items())
        return f"{told}; left out: {reasons}"

    def _judged_by(self, reference: np.ndarray) -> str:
        judged = self.judged(reference)
        output = "" if self.output is None else f" of '{self.output}'"
        if self.kind == "fidelity":
            return f"fidelity to the unmodified model's outputs{_worst_of(judged)}: " + (
                fidelity_form(judged)
            )
        if self.kind == "agreement" and judged.dtype.names is not None:
            return (
                f"top-1 agreement with the unmodified model{_worst_of(judged)}: "
                f"{agreement_form(judged)}"
            )
        if self.kind == "agreement":
            return f"top-1 agreement{output} with the unmodified model"
        if self.kind == "accuracy":
            return f"top-1 accuracy{output} against the labels"
        return f"the custom metric {self.entry_point}{output}"

    def agreement_beside(
        self, outputs: np.ndarray, reference: np.ndarray, classifier: bool = False
    ) -> float | None:
        """Top-1 agreement with the unmodified model, reported beside a metric that is not a
        top-1 figure where the judged output looks like class scores (`looks_like_class_scores`;
        `classifier`: the model is known to classify); else None."""
        if self.kind in ("accuracy", "agreement"):
            return None
        judged = self.judged(reference)
        if not looks_like_class_scores(judged, classifier):
            return None
        return agreement(self.judged(outputs), judged)


def top1_accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of samples whose highest output (over the last axis) is the label."""
    _refuse_several("accuracy", outputs)
    if outputs.ndim != 2 or outputs.shape[0] != labels.shape[0]:
        raise ValueError(
            f"top-1 accuracy needs outputs [N, classes] for {labels.shape[0]} labels, "
            f"got {list(outputs.shape)}"
        )
    return float(np.mean(outputs.argmax(axis=1) == labels.reshape(-1)))


def agreement(outputs: np.ndarray, reference: np.ndarray) -> float:
    """Fraction of samples whose highest output (over the last axis) is the reference's; for
    a model with several outputs, the worst of its outputs of class scores (`[N, classes]`;
    `agreement_form` says which were judged and why another was left out)."""
    names = reference.dtype.names
    if names is not None:
        judged = [name for name in names if _scores_left_out(reference[name]) is None]
        if not judged:
            raise ValueError(
                f"top-1 agreement judges outputs [N, classes]; none of the model's is one "
                f"({agreement_form(reference)})"
            )
        return min(agreement(outputs[name], reference[name]) for name in judged)
    if outputs.ndim != 2 or outputs.shape != reference.shape:
        raise ValueError(
            f"top-1 agreement needs outputs [N, classes] shaped as the reference "
            f"{list(reference.shape)}, got {list(outputs.shape)}"
        )
    return float(np.mean(outputs.argmax(axis=1) == reference.argmax(axis=1)))


# A sample's output needs this many values for the cosine of two of them to say how much it
# changed: of one value the cosine is only its sign, of two it is blind to most changes.
MIN_COSINE_VALUES = 8


def fidelity(outputs: np.ndarray, reference: np.ndarray) -> float:
    """How close the outputs are to the reference outputs, sample by sample, in [-1, 1]: of
    an output with at least MIN_COSINE_VALUES values a sample, the cosine similarity of each
    sample's values to the reference's; of a shorter one (a score, a probability, a few
    logits), 1 - each sample's squared error over the reference's mean squared sample
    (`relative_error_scores`). The mean over the samples; for a model with several outputs,
    the worst of them (`fidelity_form` says which form judged which output)."""
    if reference.dtype.names is not None:
        return min(fidelity(outputs[name], reference[name]) for name in reference.dtype.names)
    actual = outputs.reshape(outputs.shape[0], -1).astype(np.float64)
    expected = reference.reshape(reference.shape[0], -1).astype(np.float64)
    if expected.shape[1] < MIN_COSINE_VALUES:
        return float(np.mean(relative_error_scores(actual, expected)))
    norms = np.linalg.norm(actual, axis=1) * np.linalg.norm(expected, axis=1)
    dots = np.sum(actual * expected, axis=1)
    both_zero = (np.linalg.norm(actual, axis=1) == 0) & (np.linalg.norm(expected, axis=1) == 0)
    cosines = np.where(both_zero, 1.0, dots / np.maximum(norms, np.finfo(np.float64).tiny))
    return float(np.mean(cosines))


def relative_error_scores(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Per sample, 1 - its squared error over the reference's mean squared sample, clipped to
    [-1, 1]: 1 where unchanged, 0 where the error is as large as a typical reference value,
    -1 where it is larger still. The scale is the whole reference's, so a value near zero
    (a probability of 0.002) is not judged by its own tiny size alone."""
    errors = np.sum((actual - expected) ** 2, axis=1)
    scale = float(np.mean(np.sum(expected**2, axis=1)))
    if scale == 0.0:
        return np.where(errors == 0.0, 1.0, -1.0)
    return np.clip(1.0 - errors / scale, -1.0, 1.0)


def fidelity_form(reference: np.ndarray, name: str = "output") -> str:
    """Which form of `fidelity` judges each output of the reference, in words."""
    names = reference.dtype.names
    if names is not None:
        return "; ".join(fidelity_form(reference[field], field) for field in names)
    values = int(np.prod(reference.shape[1:], dtype=np.int64))
    if values < MIN_COSINE_VALUES:
        return (
            f"'{name}' ({values} value{'s' if values != 1 else ''} a sample): 1 - squared "
            "error / the reference's mean squared sample"
        )
    return f"'{name}' ({values} values a sample): cosine similarity per sample"


def agreement_form(reference: np.ndarray) -> str:
    """Which outputs of several top-1 agreement judges, and why it leaves one out, in words."""
    names = reference.dtype.names or ("output",)
    told = []
    for name in names:
        output = reference if reference.dtype.names is None else reference[name]
        reason = _scores_left_out(output)
        told.append(f"'{name}' {reason or 'judged (class scores)'}")
    return "; ".join(told)


def _scores_left_out(output: np.ndarray) -> str | None:
    if output.ndim == 2 and output.shape[1] >= 2:
        return None
    shape = ", ".join(map(str, output.shape[1:]))
    return f"left out ([{shape}] a sample, not a row of class scores)"


def _worst_of(judged: np.ndarray) -> str:
    return "" if judged.dtype.names is None else " (the worst of its outputs)"


def looks_like_class_scores(outputs: np.ndarray, classifier: bool = False) -> bool:
    """Whether an output is a classifier's scores: one row of two or more floats a sample that
    are probabilities or log-probabilities (each row sums to 1), or any such row where the
    model is known to classify (`classifier`). An embedding is rows of floats too, so a row
    is not taken for logits on its shape alone."""
    if outputs.dtype.names is not None or outputs.ndim != 2 or outputs.shape[1] < 2:
        return False
    if outputs.dtype.kind != "f":
        return False
    if classifier:
        return True
    rows = outputs.astype(np.float64)
    probabilities = bool(np.all(rows >= 0)) and _rows_sum_to_one(rows)
    return probabilities or (bool(np.all(rows <= 0)) and _rows_sum_to_one(np.exp(rows)))


def _rows_sum_to_one(rows: np.ndarray) -> bool:
    return bool(np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))


def _refuse_several(kind: str, outputs: np.ndarray) -> None:
    if outputs.dtype.names is not None:
        raise ValueError(
            f"the model has several outputs ({', '.join(outputs.dtype.names)}): name the one "
            f"that {kind} judges as metric.output"
        )


def resolve_metric(ref: MetricRef, python_path: list[str]) -> QualityMetric:
    metric = replace(_resolve_kind(ref, python_path), output=ref.output)
    if ref.output is None:
        return metric
    return replace(metric, score=_of_output(metric))


def _of_output(metric: QualityMetric) -> Score:
    """The metric's score applied to its `output` (of several; a model with one output has
    only that one)."""
    score = metric.score

    def scored(
        outputs: np.ndarray, labels: np.ndarray | None, reference: np.ndarray | None
    ) -> float:
        picked = None if reference is None else metric.judged(reference)
        return score(metric.judged(outputs), labels, picked)

    return scored


def _resolve_kind(ref: MetricRef, python_path: list[str]) -> QualityMetric:
    if ref.kind == "accuracy":
        return QualityMetric("accuracy", True, False, _score_accuracy, sample_range=1.0)
    if ref.kind == "fidelity":  # a score in [-1, 1] per sample
        return QualityMetric("fidelity", False, True, _against_reference(fidelity), 2.0)
    if ref.kind == "agreement":
        return QualityMetric("agreement", False, True, _against_reference(agreement), 1.0)
    assert ref.entry_point is not None  # the contract requires it for kind 'custom'
    function = resolve_entry_point(ref.entry_point, python_path, "metric.entry_point")
    if not callable(function):
        raise RequestError("metric.entry_point", "must name a callable", ref.entry_point)
    return QualityMetric(
        "custom", False, True, _checked_custom(function), entry_point=ref.entry_point
    )


def _score_accuracy(outputs: np.ndarray, labels: np.ndarray | None, _: np.ndarray | None) -> float:
    if labels is None:
        raise ValueError("metric 'accuracy' needs labels")
    return top1_accuracy(outputs, labels)


def _against_reference(compare: Callable[[np.ndarray, np.ndarray], float]) -> Score:
    def score(outputs: np.ndarray, _: np.ndarray | None, reference: np.ndarray | None) -> float:
        if reference is None:
            raise ValueError(f"metric '{compare.__name__}' needs the reference outputs")
        return compare(outputs, reference)

    return score


def _checked_custom(function: Callable[..., object]) -> Score:
    def score(
        outputs: np.ndarray, labels: np.ndarray | None, reference: np.ndarray | None
    ) -> float:
        value = function(outputs, labels, reference)
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise TypeError(f"the custom metric must return a number, got {type(value).__name__}")
        if not math.isfinite(float(value)):
            raise ValueError(f"the custom metric returned {value}")
        return float(value)

    return score


# A variant's accuracy is first judged on this many evaluation samples at least (an eighth
# of them where that is more), where the data holds twice as many.
SUBSET_SAMPLES = 64
# The confidence of the subset's upper bound on the variant's accuracy over all the data.
SUBSET_CONFIDENCE = 0.99


@dataclass(frozen=True)
class SubsetScore:
    score: float
    upper: float  # the metric over all the data is at most this, at SUBSET_CONFIDENCE
    samples: int
    of: int


def subset_size(n_samples: int) -> int | None:
    """The samples a subset judges first, or None where the data is too small to bother."""
    size = max(SUBSET_SAMPLES, n_samples // 8)
    return size if n_samples >= 2 * size else None


def hoeffding_slack(sample_range: float, samples: int, confidence: float) -> float:
    """How far above a mean of `samples` bounded scores the true mean may lie, at
    `confidence` (Hoeffding's inequality: it holds whatever the scores' distribution)."""
    return sample_range * math.sqrt(math.log(1 / (1 - confidence)) / (2 * samples))


def run_all(session: Session, inputs: np.ndarray, batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
    """Outputs for every input, in order. With a fixed-batch model the last batch is padded by
    repeating its final sample and the padding's outputs are dropped."""
    size = session.fixed_batch or batch_size
    outputs = []
    for start in range(0, inputs.shape[0], size):
        batch = inputs[start : start + size]
        real = batch.shape[0]
        if session.fixed_batch is not None and real < size:
            batch = np.concatenate([batch, np.repeat(batch[-1:], size - real, axis=0)])
        outputs.append(session.run(np.ascontiguousarray(batch))[:real])
    return np.concatenate(outputs)


def tile_batch(inputs: np.ndarray, batch_size: int) -> np.ndarray:
    """A batch of `batch_size` evaluation inputs, cycling through them when there are fewer."""
    return np.ascontiguousarray(inputs[np.arange(batch_size) % inputs.shape[0]])
