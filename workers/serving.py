"""MLflow's pyfunc loader for a registered artifact served by autotune (`Engine.served_as`
"autotune"): `mlflow.pyfunc.load_model` runs it on the engine it was measured on, with the
measured precision, threads, engine options and batch size."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.artifacts import OUTPUT_EXAMPLE_FILE
from workers.predictor import Predictor, load_predictor


class ServedModel:
    def __init__(self, predictor: Predictor, output_names: list[str]) -> None:
        self.predictor = predictor
        self.output_names = output_names
        self._axes: dict[str, int] | None = None  # output -> its batch axis, once called

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> Any:
        """The model's outputs for `model_input` (an array, or a dict of arrays by input
        name), as a dict of arrays by output name as MLflow's onnx flavour gives them."""
        inputs = model_input if isinstance(model_input, Mapping) else np.asarray(model_input)
        outputs = self.predictor.predict_packed(inputs)
        names = outputs.dtype.names
        if self._axes is None:  # after a call: a session may learn its outputs' shapes on it
            self._axes = self._batch_axes()
        axes = self._axes
        if names is None:
            name = next(iter(axes), self.output_names[0] if self.output_names else None)
            return outputs if name is None else {name: np.moveaxis(outputs, 0, axes.get(name, 0))}
        return {name: np.moveaxis(outputs[name], 0, axes.get(name, 0)) for name in names}

    def _batch_axes(self) -> dict[str, int]:
        declared = getattr(self.predictor.session, "outputs", [])
        return {spec.name: spec.batch_axis for spec in declared if spec.batch_axis is not None}


def _load_pyfunc(data_path: str) -> ServedModel:
    examples = Path(data_path) / OUTPUT_EXAMPLE_FILE
    names: list[str] = []
    if examples.is_file():
        with np.load(examples, allow_pickle=False) as outputs:
            names = list(outputs.files)
    return ServedModel(load_predictor(data_path), names)
