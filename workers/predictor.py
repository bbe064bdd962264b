"""A tuned model ready to call, run as its trial measured it: the session of the measured
engine, precision, threads and engine options, fed in batches of the measured size."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from autotune.core.contract import TrialSpec
from autotune.core.knobs.config import TrialConfig
from workers.artifacts import export_artifact, load_artifact
from workers.building.runtimes import Session, close_session
from workers.building.torch_io import leaf_names, rebuilt
from workers.cache import WorkloadCache
from workers.loading.feeds import InputSpec, pack, pack_inputs
from workers.measuring.evaluate import run_all


class Predictor:
    def __init__(self, session: Session, config: TrialConfig) -> None:
        self.session = session
        self.config = config
        # The numbers of inputs one call of the session runs as they are given: no slicing,
        # padding or joining of outputs (a fixed-batch model's size, else up to the batch size).
        fixed = session.fixed_batch
        self._one_call = range(fixed, fixed + 1) if fixed else range(1, config.batch_size + 1)

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    def predict(self, inputs: np.ndarray | Mapping[str, np.ndarray]) -> Any:
        """The model's output for every input, in order: `inputs` is one array, or for a model
        with several inputs a dict of arrays by input name, each in the model's own layout (a
        state batched on its second axis, a scalar given once). A torch model's outputs come
        back nested as its module returns them (a tuple of arrays, a dict of them, ...), None
        in the place of an output left out of judging (one without a batch axis) and an output
        judged whole (of a model of a batch of one) stacked per sample, alike on every engine
        (its ONNX export says how each was judged); an ONNX model's several outputs as one
        structured array with a field per output that has a batch axis, that axis first."""
        return self.structured(self.predict_packed(inputs))

    def predict_packed(self, inputs: np.ndarray | Mapping[str, np.ndarray]) -> np.ndarray:
        """`predict`'s outputs as the sessions give them: the only one as an array, several as
        one structured array with a field per output, the batch axis first."""
        records = self.records(inputs)
        if records.ndim and records.shape[0] in self._one_call:
            return self.session.run(np.ascontiguousarray(records))
        return run_all(self.session, records, self.batch_size)

    def structured(self, outputs: np.ndarray) -> Any:
        """`outputs` nested as the torch module returned them, where the session knows how:
        None in the place of an output left out of judging (`outputs_left_out`, or an ONNX
        output without a batch axis)."""
        structure = getattr(self.session, "output_structure", None)
        if structure is None or structure.is_leaf():  # a lone output needs no rebuilding
            return outputs
        # The session's names for the module's outputs, in its flattening order (an exporter
        # may rename an output: ONNX outputs are matched to the module's by their place).
        declared = getattr(self.session, "outputs", None)
        names = leaf_names(structure) if declared is None else [spec.name for spec in declared]
        judged = self._judged(outputs, names, declared or [])
        if judged is None or len(names) != structure.num_leaves:
            return outputs  # which output is which is not known
        return rebuilt(structure, [judged.get(name) for name in names])

    def _judged(
        self, outputs: np.ndarray, names: list[str], declared: Sequence[InputSpec]
    ) -> dict[str, np.ndarray] | None:
        """The judged outputs by name; None where the session returned one array and does not
        say which output it is."""
        fields = outputs.dtype.names
        if fields is not None:
            return {name: outputs[name] for name in fields}
        left_out = getattr(self.session, "outputs_left_out", {})
        unbatched = {spec.name for spec in declared if spec.batch_axis is None}
        kept = [name for name in names if name not in left_out and name not in unbatched]
        return {kept[0]: outputs} if len(kept) == 1 else None

    def records(self, inputs: np.ndarray | Mapping[str, np.ndarray]) -> np.ndarray:
        if not isinstance(inputs, Mapping):
            return np.asarray(inputs)
        declared = getattr(self.session, "inputs", None)
        if declared is None:
            return pack(inputs)
        arrays = {name: np.asarray(array) for name, array in inputs.items()}
        return pack_inputs(arrays, declared)

    def close(self) -> None:
        close_session(self.session)

    def __enter__(self) -> Predictor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def exported_and_loaded(spec: TrialSpec, store: WorkloadCache | None = None) -> Predictor:
    """The configuration of `spec` as `autotune.load` runs it once tuned: exported as a tuned
    model is (`export_artifact`), into a directory that is gone once it is loaded."""
    with tempfile.TemporaryDirectory(prefix="autotune-loaded-") as directory:
        export_artifact(spec, directory, store)
        return load_predictor(directory, spec.workload.python_path)


def load_predictor(artifact: str, python_path: Sequence[str] = ()) -> Predictor:
    """The predictor of an artifact directory (or file) written by `export_artifact`; a torch
    artifact imports its model's entry point from `python_path` and `sys.path`."""
    session, config = load_artifact(artifact, list(python_path))
    return Predictor(session, config)
