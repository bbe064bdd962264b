"""How static int8 calibrates: the calibration samples fed in batches
(`calibration_subset`, `calibration_feeds`, `calibration_reader`), and ONNX Runtime's
activation ranges calibrated apart for `precision.calibration` (`calibration_arguments`),
over finite values only (`FiniteOutputs`)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import Unsupported
from workers.loading.feeds import feed, graph_inputs, model_fixed_batch

if TYPE_CHECKING:
    import onnx

# Static quantization calibrates on at most this many of the calibration samples (held out of
# the evaluation, `workers.loading.workloads.EvalData`), evenly spaced over them, fed in
# batches of CALIBRATION_BATCH (or the model's fixed batch size).
CALIBRATION_SAMPLES = 256
CALIBRATION_BATCH = 32

# quantize_static gives ONNX Runtime's entropy calibrator as many quantized bins as histogram
# bins (128 each), which leaves its KL-divergence search a single candidate, the full range
# (MinMax's). Calibrated apart, it histograms ENTROPY_BINS and searches ranges of
# ENTROPY_QUANTIZED_BINS to ENTROPY_BINS bins (TensorRT's method). The search's time grows with
# the square of the bins (about 1 s per activation at 1024 on a 2-core Xeon, 3 s at 2048).
ENTROPY_BINS = 1024
ENTROPY_QUANTIZED_BINS = 128


def calibration_arguments(
    model: onnx.ModelProto,
    reader: Any,
    method: str,
    op_types: tuple[str, ...] | None,
    directory: str,
) -> tuple[dict[str, Any], set[str]]:
    """quantize_static's calibration arguments for `method` (the activation ranges calibrated
    apart, in the cache file it reads) and the nodes to keep in float: those that produce or
    read an activation that held infinities or NaN (an attention mask's -inf), which has no
    int8 range. Calibrated apart, every method sees each activation's finite values only
    (`FiniteOutputs`), and entropy searches ENTROPY_BINS."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    calibrated = Path(directory) / "calibrated.onnx"
    # saving as external data rewrites the model it saves; the quantizer reads it after
    onnx.save_model(copy.deepcopy(model), str(calibrated), save_as_external_data=True)
    chosen, extra = CALIBRATIONS[method]
    calibrator = create_calibrator(
        calibrated,
        list(op_types or sorted({*QLinearOpsRegistry, *QDQRegistry})),
        augmented_model_path=str(Path(directory) / "augmented.onnx"),
        calibrate_method=getattr(CalibrationMethod, chosen),
        extra_options=extra,
    )
    session = FiniteOutputs(calibrator.infer_session)
    calibrator.infer_session = session
    calibrator.collect_data(reader)
    ranges = Path(directory) / "ranges.json"
    save_tensors_data(calibrator.compute_data(), ranges)
    arguments = {
        "calibration_data_reader": None,
        "calibrate_method": getattr(CalibrationMethod, chosen),
        "calibration_cache_path": ranges,
    }
    touching = {
        node.name
        for node in model.graph.node
        if session.non_finite.intersection([*node.input, *node.output])
    }
    return arguments, touching


# precision.calibration -> ONNX Runtime's calibration method and its options.
CALIBRATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "minmax": ("MinMax", {}),
    "percentile": ("Percentile", {}),  # its 99.999th percentile, of 2048 bins
    "entropy": (
        "Entropy",
        {"num_bins": ENTROPY_BINS, "num_quantized_bins": ENTROPY_QUANTIZED_BINS},
    ),
}


class FiniteOutputs:
    """A calibrator's inference session whose outputs hold finite values only: an activation's
    infinities (an attention mask's -inf added to the scores before a softmax) become its
    finite extremes and NaN 0, so a range is what the finite values span; with an infinity
    in it a min/max scale is infinite and a histogram cannot be built."""

    def __init__(self, session: Any) -> None:
        self._session = session
        # The tensors whose outputs held a non-finite value (MinMax's augmented model outputs
        # each tensor's `<name>_ReduceMin` and `<name>_ReduceMax`, the others the tensor).
        self.non_finite: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, output_names: Any, feeds: Any) -> list[Any]:
        names = output_names or [output.name for output in self._session.get_outputs()]
        outputs = []
        for name, output in zip(names, self._session.run(output_names, feeds), strict=True):
            cleaned = finite(output)
            if cleaned is not output:
                self.non_finite.add(name.removesuffix("_ReduceMin").removesuffix("_ReduceMax"))
            outputs.append(cleaned)
        return outputs


def finite(array: Any) -> Any:
    """`array` with its non-finite values replaced by its finite extremes (NaN by 0)."""
    if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
        return array
    valid = np.isfinite(array)
    if valid.all():
        return array
    low, high = (array[valid].min(), array[valid].max()) if valid.any() else (0.0, 0.0)
    return np.nan_to_num(array, nan=0.0, posinf=high, neginf=low)


def calibration_subset(inputs: np.ndarray, limit: int = CALIBRATION_SAMPLES) -> np.ndarray:
    """At most `limit` samples, evenly spaced over `inputs` (so data sorted by class still
    contributes every class); always the same ones."""
    count = min(len(inputs), limit)
    return inputs[np.arange(count) * len(inputs) // count]


def calibration_feeds(
    model: onnx.ModelProto, samples: np.ndarray, mode: str = "int8_static"
) -> list[dict[str, np.ndarray]]:
    """`samples` as the model's feeds, in batches of one size: the model's fixed batch size,
    else at most CALIBRATION_BATCH and as even as the count allows; the few left over are left
    out (ONNX Runtime's histogram calibrators stack the batches' outputs, so they need one
    shape)."""
    inputs = graph_inputs(model)
    count = len(samples)
    size = model_fixed_batch(inputs) or count // max(1, -(-count // CALIBRATION_BATCH))
    if size == 0 or count < size:
        raise Unsupported(
            f"precision.mode={mode}: {count} calibration samples do not fill one batch"
            + (f" of {size}" if size else "")
        )
    stop = count - count % size
    return [feed(samples[start : start + size], inputs) for start in range(0, stop, size)]


def calibration_reader(model: onnx.ModelProto, samples: np.ndarray) -> Any:
    """An onnxruntime CalibrationDataReader feeding `calibration_feeds(model, samples)`."""
    from onnxruntime.quantization import CalibrationDataReader

    batches = calibration_feeds(model, samples)

    class Batches(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._batches: Iterator[dict[str, np.ndarray]] = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    return Batches()
