"""Fixtures for the data-plane tests: the digits workload, an ONNX export of it, and
throw-away entry-point modules."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from autotune.core.contract import (
    ConfigValue,
    DataRef,
    MeasurementSettings,
    MetricRef,
    ModelRef,
    TrialSpec,
    Workload,
)
from tests.conftest import REPO

DIGITS_MODEL = "experiments.digits.model:build_model"
DIGITS_DATA = "experiments.digits.model:eval_data"
# Measured at once and marked when the machine is busy ('warn'): the default waits up to
# 10 s per trial for quiet, which on a shared machine is most of a test's time. The machine is
# watched only while the trial measures (the contention tests watch as long as the default).
FAST = MeasurementSettings(
    warmup_iters=2,
    min_iters=5,
    max_iters=50,
    min_seconds=0.0,
    max_seconds=0.5,
    contention="warn",
    contention_window_s=0.0,
)
_module_numbers = itertools.count()


def digits_workload(
    model: ModelRef | None = None,
    data: DataRef | None = None,
    metric: MetricRef | None = None,
    extra_path: Sequence[str | Path] = (),
) -> Workload:
    """The digits workload, with any part replaced."""
    return Workload(
        model=model or ModelRef(entry_point=DIGITS_MODEL),
        data=data or DataRef(entry_point=DIGITS_DATA),
        metric=metric or MetricRef(),
        python_path=[str(REPO), *map(str, extra_path)],
    )


def spec_for(
    workload: Workload, config: dict[str, ConfigValue], known_accuracy: float | None = None
) -> TrialSpec:
    return TrialSpec(
        study="test",
        trial_number=0,
        workload=workload,
        config=config,
        measurement=FAST,
        known_accuracy=known_accuracy,
    )


def skip_unless_runnable_here(config: dict[str, ConfigValue], model_kind: str = "torch") -> None:
    """Skips the calling test where this machine cannot run `config` (bf16 on a CPU without
    bf16 instructions, say), naming the reason the knobs give."""
    from autotune.core.errors import Unsupported
    from autotune.core.knobs.config import parse_config
    from workers.building.runtimes import check_runtime

    try:
        check_runtime(parse_config(config, model_kind), model_kind)
    except Unsupported as unsupported:
        pytest.skip(f"not on this machine: {unsupported}")


@pytest.fixture(scope="session")
def digits() -> tuple[np.ndarray, np.ndarray]:
    from experiments.digits.model import eval_data

    return eval_data()


@pytest.fixture(scope="session")
def digits_module():  # type: ignore[no-untyped-def]
    from experiments.digits.model import build_model

    return build_model()


def export_digits_onnx(module, path: Path, batch: int | None = None) -> Path:  # type: ignore[no-untyped-def]
    """Export the digits CNN; with `batch`, the batch axis is fixed to that size."""
    import torch

    from workers.building.transforms import torch_to_onnx

    if batch is None:
        path.write_bytes(torch_to_onnx(module, np.zeros((2, 1, 8, 8), np.float32)))
    else:
        torch.onnx.export(module, (torch.zeros(batch, 1, 8, 8),), str(path), dynamo=False)
    return path


@pytest.fixture(scope="session")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory, digits_module) -> Path:  # type: ignore[no-untyped-def]
    return export_digits_onnx(digits_module, tmp_path_factory.mktemp("onnx") / "digits.onnx")


@pytest.fixture(scope="session")
def digits_npz(
    tmp_path_factory: pytest.TempPathFactory, digits: tuple[np.ndarray, np.ndarray]
) -> Path:
    path = tmp_path_factory.mktemp("npz") / "digits.npz"
    np.savez(path, inputs=digits[0], labels=digits[1])
    return path


@pytest.fixture
def make_module(tmp_path: Path) -> Callable[[str], str]:
    """Write Python source to a uniquely named module under tmp_path; return its name.
    Workloads using it need `python_path=[str(tmp_path)]`."""

    def make(source: str) -> str:
        name = f"workers_test_module_{next(_module_numbers)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return make
