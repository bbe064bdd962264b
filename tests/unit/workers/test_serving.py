"""`ServedModel.predict` reads its outputs' batch axes once, after its first call (a session
may learn its outputs' shapes on it), and gives each output with its batch where the model
has it."""

from __future__ import annotations

import numpy as np

from autotune.core.knobs.config import parse_config
from workers.loading.feeds import InputSpec
from workers.predictor import Predictor
from workers.serving import ServedModel


class StateSession:
    """Returns a state [2, batch, 3]; declares its batch axis only once called, as a session
    that checks its first call's shapes does; counts the reads of its declared outputs."""

    fixed_batch = None

    def __init__(self) -> None:
        self._outputs = [InputSpec("state", np.float32, None, batch_axis=0)]
        self.reads = 0

    @property
    def outputs(self) -> list[InputSpec]:
        self.reads += 1
        return self._outputs

    def run(self, batch: np.ndarray) -> np.ndarray:
        self._outputs = [InputSpec("state", np.float32, (2, None, 3), batch_axis=1)]
        state = np.stack([batch, -batch])  # [2, batch, 3]
        return np.moveaxis(state, 1, 0)  # as sessions give it: the batch axis first


def test_the_batch_axes_are_read_once_after_the_first_call() -> None:
    session = StateSession()
    served = ServedModel(Predictor(session, parse_config({"batch.size": 8}, "onnx")), ["state"])
    inputs = np.arange(12, dtype=np.float32).reshape(4, 3)
    for _ in range(3):
        state = served.predict(inputs)["state"]
        np.testing.assert_array_equal(state, np.stack([inputs, -inputs]))
    assert session.reads == 1
