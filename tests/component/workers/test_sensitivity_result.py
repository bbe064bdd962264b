"""A trial whose int8 variant was built by a sensitivity ranking (precision.fallback) carries
that ranking in its result: measured once per model and mode in a worker, then reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.core.contract import DataRef, MetricRef, ModelRef, TrialResult, Workload
from tests.hostile_onnx import NODES, hostile_model, inputs
from tests.workers_support import spec_for
from workers.cache import WorkloadCache
from workers.runner import run_trial

INT8 = {"runtime.engine": "onnxruntime", "precision.mode": "int8_static"}


def hostile_workload(directory: Path) -> Workload:
    model_path, data_path = directory / "hostile.onnx", directory / "data.npz"
    model_path.write_bytes(hostile_model())
    np.savez(data_path, inputs=inputs())
    return Workload(
        model=ModelRef(onnx=str(model_path)),
        data=DataRef(npz=str(data_path)),
        metric=MetricRef(kind="fidelity"),
    )


def test_a_fallback_trial_carries_its_ranking_computed_once(tmp_path: Path) -> None:
    workload, store = hostile_workload(tmp_path), WorkloadCache()
    first = run_trial(spec_for(workload, {**INT8, "precision.fallback": 1}), store)
    again = run_trial(spec_for(workload, {**INT8, "precision.fallback": 2}), store)
    plain = run_trial(spec_for(workload, INT8), store)
    assert first.status == "ok", first.reason
    ((table,),) = [first.sensitivity]
    assert table.mode == "int8_static" and table.computed and table.seconds > 0
    assert [n.node for n in table.nodes][0] == "hostile"
    assert {n.node for n in table.nodes} == set(NODES)
    assert [n.rank for n in table.nodes] == [1, 2, 3]
    assert {n.op_type for n in table.nodes} == {"MatMul"}
    assert [n.node for n in table.carrying()] == ["hostile"]
    assert table.summary().startswith(
        "int8 sensitivity (int8_static): 1 of 3 operations carry 80% of the drop: hostile"
    )
    (reused,) = again.sensitivity
    assert not reused.computed and reused.nodes == table.nodes
    assert plain.sensitivity == []
    assert TrialResult.model_validate_json(first.model_dump_json()) == first


def test_a_refused_fallback_still_carries_the_ranking_it_measured(tmp_path: Path) -> None:
    workload = hostile_workload(tmp_path)
    result = run_trial(spec_for(workload, {**INT8, "precision.fallback": 4}), WorkloadCache())
    assert result.status == "unsupported"
    (table,) = result.sensitivity
    assert table.computed and len(table.nodes) == 3
