"""The tuned file and the list of several kinds' tuned files read as written: every
character as itself, and loaded back the same."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotune.conclusion.tuned_file import TunedIndex, TunedKind, read_tuned
from tests.conclusion_support import tuned_config


def test_the_tuned_file_writes_the_headline_as_it_reads_and_loads_back_equal(
    tmp_path: Path,
) -> None:
    tuned = tuned_config()
    path = tmp_path / "tuned.yaml"
    path.write_text(tuned.to_yaml(), encoding="utf-8")
    written = path.read_text(encoding="utf-8")
    assert "4.13× lower p95" in written and "4.13–4.13×" in written
    assert "Intel® Xeon®" in written
    assert "\\x" not in written and "\\u" not in written
    assert read_tuned(path) == tuned


def test_the_list_of_kinds_writes_their_hardware_as_it_reads(tmp_path: Path) -> None:
    kinds = [
        TunedKind(
            fingerprint=f, hardware="Intel® Xeon®, 8 cores", study=f"s@{f}", tuned=f"{f}.yaml"
        )
        for f in ("aaa", "bbb")
    ]
    written = TunedIndex(kinds=kinds).to_yaml()
    assert "hardware: Intel® Xeon®, 8 cores" in written
    assert TunedIndex.model_validate(yaml.safe_load(written)) == TunedIndex(kinds=kinds)
