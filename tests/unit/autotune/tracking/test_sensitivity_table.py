"""An int8 sensitivity ranking as the study shows it: the fewest nodes that carry most of the
drop, the ranked table's files, and the search's time note."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from autotune.conclusion.tuned_file import precision_choice
from autotune.core.artifacts import VARIANT_FILE
from autotune.core.contract.trials import NodeSensitivity, SensitivityTable
from autotune.search.report import sensitivity_note
from autotune.tracking.sensitivity import sensitivity_files


def table(*drops: float | None, mode: str = "int8_static") -> SensitivityTable:
    nodes = [
        NodeSensitivity(node=f"/layer{rank}/Conv", rank=rank, op_type="Conv", drop=drop)
        for rank, drop in enumerate(drops, start=1)
    ]
    return SensitivityTable(model_sha256="c" * 64, mode=mode, seconds=4.25, nodes=nodes)


def test_the_fewest_nodes_that_carry_four_fifths_of_the_drop_are_named() -> None:
    ranked = table(0.5, 0.2, 0.15, 0.1, 0.05, None)
    assert [n.node for n in ranked.carrying()] == ["/layer1/Conv", "/layer2/Conv", "/layer3/Conv"]
    assert ranked.summary() == (
        "int8 sensitivity (int8_static): 3 of 6 operations carry 80% of the drop: "
        "/layer1/Conv, /layer2/Conv, /layer3/Conv (the largest alone: 0.5)"
    )


def test_a_model_that_int8_does_not_hurt_says_so() -> None:
    assert table(0.0, 0.0, None).carrying() == []
    assert table(0.0, None).summary() == (
        "int8 sensitivity (int8_static): none of 2 operations drops the accuracy when int8"
    )


def test_the_table_files_rank_every_node_unmeasured_ones_without_a_drop() -> None:
    files = sensitivity_files(table(0.5, None))
    assert sorted(files) == ["int8_sensitivity_int8_static.csv", "int8_sensitivity_int8_static.md"]
    rows = list(csv.DictReader(io.StringIO(files["int8_sensitivity_int8_static.csv"])))
    assert [(r["rank"], r["node"], r["op_type"], r["drop"]) for r in rows] == [
        ("1", "/layer1/Conv", "Conv", "0.5"),
        ("2", "/layer2/Conv", "Conv", ""),
    ]
    markdown = files["int8_sensitivity_int8_static.md"]
    assert "1 of 2 operations carry 80% of the drop: /layer1/Conv" in markdown
    assert "1 measured in 4.2 s" in markdown and "| 2 | /layer2/Conv | Conv | - |" in markdown


def test_the_time_note_weighs_the_rankings_measured_against_the_search() -> None:
    note = sensitivity_note([table(0.5)], {"int8_static": 4.0}, 40.0)
    assert note is not None
    head, line = note.splitlines()
    assert head == "int8 sensitivity measured in 4.0 s of the trials' build time, 10% of the "\
        "search's 40.0 s"  # fmt: skip
    assert line.startswith("int8 sensitivity (int8_static): 1 of 1 operations")
    resumed = sensitivity_note([table(0.5)], {}, 40.0)
    assert resumed is not None and resumed.startswith("int8 sensitivity: no ranking measured")
    assert sensitivity_note([], {}, 40.0) is None


def test_the_tuned_file_names_an_int8_choices_float_nodes(tmp_path: Path) -> None:
    artifact = tmp_path / "model.onnx"
    (tmp_path / VARIANT_FILE).write_text('{"float_nodes": ["/head/Conv_2"]}')
    config = {"precision.mode": "int8_static", "precision.fallback": 1, "batch.size": 8}
    choice = precision_choice(config, artifact)
    assert choice is not None and choice.float_nodes == ["/head/Conv_2"]
    assert choice.settings == {"precision.mode": "int8_static", "precision.fallback": 1}
    plain = precision_choice({"precision.mode": "int8_dynamic"}, tmp_path / "none" / "model.onnx")
    assert plain is not None and plain.float_nodes == []
    unknown = precision_choice(config, tmp_path / "none" / "model.onnx")
    assert unknown is not None and unknown.float_nodes is None
    assert precision_choice({"precision.mode": "fp32"}, artifact) is None
