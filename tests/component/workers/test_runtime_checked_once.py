"""A trial's session is built for a configuration the runtime check passed once: the variant
and the session are not checked again on the way."""

from __future__ import annotations

from typing import Any

import pytest

import workers.building.runtimes as runtimes
import workers.building.transforms as transforms
import workers.cache as cache
from autotune.core.errors import Unsupported
from tests.workers_support import digits_workload
from workers.building.runtimes import opened
from workers.cache import WorkloadCache


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The configurations `check_runtime` is asked about, wherever it is called from."""
    asked: list[Any] = []
    check = runtimes.check_runtime

    def counted(config: Any, model_kind: Any = None) -> None:
        asked.append(config)
        check(config, model_kind)

    for module in (runtimes, transforms, cache):
        monkeypatch.setattr(module, "check_runtime", counted)
    return asked


@pytest.mark.parametrize("engine", ["torch_eager", "onnxruntime"])
def test_a_session_and_its_new_variant_are_checked_once(engine: str, checks: list[Any]) -> None:
    loaded = WorkloadCache().get(digits_workload())
    config = loaded.parse({"runtime.engine": engine, "precision.mode": "fp32"})
    with opened(loaded.session_for(config)) as session:
        assert session.run(loaded.one_batch()).shape[0] == loaded.one_batch().shape[0]
    assert checks == [config]


def test_a_refused_configuration_is_refused_before_its_variant_is_built(
    checks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = WorkloadCache().get(digits_workload())
    config = loaded.parse({"runtime.engine": "torch_eager", "precision.mode": "fp32"})

    def refuse(config: Any, model_kind: Any = None) -> None:
        raise Unsupported("refused here")

    monkeypatch.setattr(cache, "check_runtime", refuse)
    with pytest.raises(Unsupported, match="refused here"):
        loaded.session_for(config)
    assert loaded.onnx_by_variant == {} and checks == []
