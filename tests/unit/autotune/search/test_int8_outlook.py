"""A study's end says what its sensitivity ranking predicts of an int8 mode none of whose
variants met the accuracy bound: that int8 cannot pay on the model, or how many nodes in
float would meet the bound."""

from __future__ import annotations

from typing import Any

from autotune.core.contract.trials import NodeSensitivity, SensitivityTable
from autotune.results.records import TrialRecord
from autotune.search.int8_outlook import int8_outlook_notes


def record(number: int, drop: float, **config: Any) -> TrialRecord:
    return TrialRecord(
        number=number,
        state="complete",
        status="ok",
        config={"runtime.engine": "onnxruntime", "precision.mode": "int8_static", **config},
        metrics={"accuracy_drop": drop, "latency_p95_ms": 2.5},
    )


def table(*drops: float, unmeasured: int, mode: str = "int8_static") -> SensitivityTable:
    nodes = [
        NodeSensitivity(node=f"node{rank}", rank=rank, op_type="Conv", drop=drop)
        for rank, drop in enumerate((*drops, *[None] * unmeasured), start=1)
    ]
    return SensitivityTable(model_sha256="a" * 64, mode=mode, seconds=1.0, nodes=nodes)


def test_where_the_bound_needs_over_a_quarter_in_float_int8_cannot_pay() -> None:
    even = table(*([0.01] * 20), unmeasured=24)
    records = [record(3, 0.2), record(4, 0.15, **{"precision.calibration": "percentile"})]
    [note] = int8_outlook_notes(records, [even], max_drop=0.01)
    assert note.startswith("int8_static: no variant met max_accuracy_drop 0.01")
    assert "trial #4 (onnxruntime, percentile calibration, p95 2.5 ms), drops 0.1500" in note
    # 0.15 carried evenly by 20 nodes: 19 of the 44 in float to leave 0.0075.
    assert "int8 cannot pay on this model" in note and "19 of 44 quantizable nodes" in note


def test_where_few_nodes_would_do_the_note_names_the_fallback_that_would() -> None:
    dominant = table(0.092, 0.005, 0.005, unmeasured=20)
    [note] = int8_outlook_notes([record(3, 0.1)], [dominant], max_drop=0.01)
    assert "cannot pay" not in note
    assert note.endswith(
        "1 of 23 quantizable nodes in float would meet the bound (precision.fallback: 1)"
    )


def test_no_note_where_a_variant_met_the_bound_or_there_is_no_bound() -> None:
    even = table(*([0.01] * 20), unmeasured=24)
    met = [record(3, 0.2), record(4, 0.005, **{"precision.fallback": 2})]
    assert int8_outlook_notes(met, [even], max_drop=0.01) == []
    assert int8_outlook_notes([record(3, 0.2)], [even], max_drop=None) == []


def test_without_a_ranking_of_the_mode_the_note_says_so() -> None:
    other_mode = table(0.1, unmeasured=3, mode="int8_dynamic")
    [note] = int8_outlook_notes([record(3, 0.2)], [other_mode], max_drop=0.01)
    assert note.endswith("(no sensitivity ranking of its model: the space keeps no node in float)")


def test_an_int8_variant_no_faster_than_float_cannot_pay_whatever_the_ranking() -> None:
    dominant = table(0.092, 0.005, 0.005, unmeasured=20)
    fp32 = TrialRecord(
        number=0,
        state="complete",
        status="ok",
        config={"runtime.engine": "onnxruntime", "precision.mode": "fp32"},
        metrics={"accuracy_drop": 0.0, "latency_p95_ms": 1.25},
    )
    [note] = int8_outlook_notes([fp32, record(3, 0.1)], [dominant], max_drop=0.01)
    expected = "int8 cannot pay on this model: its call takes 2.5 ms at p95, no less than"
    assert f"{expected} fp32's 1.25 ms (trial #0)" in note


def test_torch_s_own_int8_is_told_apart_from_the_onnx_model_s() -> None:
    onnx = table(0.092, 0.005, 0.005, unmeasured=20, mode="int8_dynamic")
    on_torch = record(4, 0.2, **{"runtime.engine": "torch_eager"})
    on_torch.config["precision.mode"] = "int8_dynamic"
    notes = int8_outlook_notes([on_torch], [onnx], max_drop=0.01)
    assert [n.split(":")[0] for n in notes] == ["int8_dynamic on torch"]
    assert notes[0].endswith(
        "(no sensitivity ranking of its model: the space keeps no node in float)"
    )
