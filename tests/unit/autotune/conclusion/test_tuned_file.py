"""The tuned file and the list of several kinds' tuned files read as written: every
character as itself, and loaded back the same."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotune.conclusion.decision import Headline, Ratio
from autotune.conclusion.tuned_file import TunedConfig, TunedIndex, TunedKind, read_tuned

TEXT = "4.13× lower p95 latency per call (95% CI 4.13–4.13×); 10 paired rounds, replayed"


def tuned_config() -> TunedConfig:
    return TunedConfig(
        config={"batch.size": 8, "precision.mode": "int8_static"},
        metrics={"latency_p95_ms": 0.089},
        baseline={"latency_p95_ms": 0.369},
        constraints={},
        model={"source": "experiments.digits.model:build_model", "sha256": "ab"},
        hardware={"fingerprint": "966fa2efe11c1e8d", "cpu_model": "Intel® Xeon® CPU"},
        software={"autotune": "0.1"},
        study={"name": "digits-cnn", "storage": "sqlite:///o.db", "n_trials": 12},
        mlflow={"tracking_uri": "sqlite:///m.db", "experiment_id": "1", "run_id": "r"},
        artifact="model/config.json",
        headline=Headline(
            text=TEXT,
            ratios={"latency_p95_ms": Ratio(ratio=0.242, ci_low=0.242, ci_high=0.242)},
            rounds=10,
            contended_rounds=0,
            conditions="replayed",
            same_as_baseline=False,
        ),
        revalidation={"rounds": 10},
    )


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
