from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.space.hardware import load_profile
from autotune.space.search_space import effective_space, load_space
from experiments.tables import record
from tests.conftest import REPO
from workers.building.probe import probe

HEADER_TAIL = [
    "status",
    "reason",
    "accuracy",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_mean_ms",
    "latency_cv",
    "throughput_per_s",
    "energy_per_sample_j",
    "energy_source",
    "peak_memory_mb",
    "measure_seconds",
]
DIGITS_DIMENSIONS = [
    "runtime.engine",
    "runtime.threads",
    "batch.size",
    "precision.mode",
    "prune.method",
    "prune.ratio",
]
# The machine the tables were recorded on (2 cores, AVX-512 VNNI/BF16, no GPU).
PROFILE = REPO / "search_spaces" / "profiles" / "cpu-only.json"
# Space sizes, counted by hand from the space files: engines x threads x batch sizes x
# precisions x (no pruning + pruning methods x ratios).
SPACE_SIZES = {"digits": 3 * 2 * 3 * 4 * (1 + 2 * 3), "minilm": 3 * 2 * 3 * 4 * (1 + 1 * 2)}


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


@pytest.mark.slow
def test_recorder_writes_the_table_format(tmp_path: Path) -> None:
    out = tmp_path / "digits.csv"
    record.main(["digits", "--out", str(out), "--limit", "3"])
    fields, rows = _read(out)
    assert fields == DIGITS_DIMENSIONS + HEADER_TAIL
    assert len(rows) == 3
    for row in rows:
        assert row["status"] == "ok" and row["reason"] == ""
        assert float(row["latency_p50_ms"]) > 0 and float(row["latency_p95_ms"]) > 0
        assert float(row["measure_seconds"]) > 0
    assert rows[0]["prune.method"] == "none" and rows[0]["prune.ratio"] == ""
    # The space as this machine's hardware filters it (bf16 and int8 need CPU instructions).
    here = effective_space(
        load_space(record.TABLES["digits"].space_file), probe(), "digits", apply_knob_rules=False
    )
    sidecar = out.with_suffix(".md").read_text()
    assert f"Rows: 3; the space has {len(record.configurations(here))} configurations" in sidecar


@pytest.mark.slow
def test_a_rerun_resumes_without_measuring_again(tmp_path: Path) -> None:
    out = tmp_path / "digits.csv"
    record.main(["digits", "--out", str(out), "--limit", "1"])
    record.main(["digits", "--out", str(out), "--limit", "2"])
    _, rows = _read(out)
    assert [row["prune.ratio"] for row in rows] == ["", "0.2"]
    assert "1 rows measured, 1 already in the file" in out.with_suffix(".md").read_text()


def test_inactive_dimensions_are_not_multiplied_out() -> None:
    space = effective_space(
        load_space(record.TABLES["digits"].space_file),
        load_profile(PROFILE),
        "digits",
        apply_knob_rules=False,
    )
    configs = record.configurations(space)
    unpruned = [c for c in configs if c["prune.method"] == "none"]
    assert unpruned and all("prune.ratio" not in c for c in unpruned)
    assert len(configs) == SPACE_SIZES["digits"]


@pytest.mark.parametrize("name", sorted(record.TABLES))
def test_recorded_table_covers_its_space_exactly(name: str) -> None:
    table = record.TABLES[name]
    space = effective_space(
        load_space(table.space_file), load_profile(PROFILE), name, apply_knob_rules=False
    )
    fields, rows = _read(table.default_out)
    assert fields == record.header(space)
    dimensions = [d.name for d in space.dimensions]
    recorded = [tuple(row[d] for d in dimensions) for row in rows]
    assert len(set(recorded)) == len(recorded), "a configuration is recorded twice"
    expected = {record.cells(c, dimensions) for c in record.configurations(space)}
    assert set(recorded) == expected
    assert len(rows) == SPACE_SIZES[name]
    for row in rows:
        if row["status"] == "ok":
            assert row["accuracy"] != "" and float(row["latency_p95_ms"]) > 0
        else:
            assert row["reason"] != "" and row["latency_p95_ms"] == ""
    assert table.default_out.with_suffix(".md").is_file()
