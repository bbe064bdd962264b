"""A re-tune against recorded tables, end to end: the previous tuning's choice is measured in
the new study's head-to-head, and its comparison reaches the tuned file and MLflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from autotune.conclusion.previous import SAME_CONFIGURATION
from autotune.conclusion.tuned_file import TunedConfig
from autotune.search.warm_start import load_warm_start
from autotune.tuning import TuneOptions, run_tune
from tests.replay_tables import (
    config_of,
    recorded_rows,
    write_request,
    write_table,
)


def tune(directory: Path, study: str, rows: list[dict[str, Any]], **options: Any) -> TunedConfig:
    table = write_table(directory / f"{study}.csv", rows)
    settings = TuneOptions(
        replay=table,
        storage=f"sqlite:///{directory / 'study.db'}",
        study=study,
        seed=0,
        out_dir=directory / study,
        **options,
    )
    outcome, _ = run_tune(write_request(directory), settings)
    assert outcome.tuned is not None
    return outcome.tuned


def retune(directory: Path, study: str, rows: list[dict[str, Any]], first: TunedConfig) -> Any:
    warm = load_warm_start("first", f"sqlite:///{directory / 'study.db'}")
    previous = first.model_dump(mode="json")
    return tune(directory, study, rows, warm_start=warm, previous_tuned=previous)


def logged_comparison(tuned: TunedConfig, directory: Path) -> tuple[dict[str, Any], dict]:
    client = MlflowClient(tuned.mlflow["tracking_uri"])
    run_id = tuned.mlflow["run_id"]
    local = client.download_artifacts(run_id, "comparison.json", str(directory))
    return json.loads(Path(local).read_text()), client.get_run(run_id).data.metrics


def slower(rows: list[dict[str, Any]], config: dict[str, Any], factor: float) -> list[dict]:
    """The table with `config`'s row `factor` times slower per call."""
    changed = []
    for row in rows:
        if config_of(row) == config:
            row = {**row, "latency_p95_ms": round(row["latency_p95_ms"] * factor, 4)}
        changed.append(row)
    return changed


@pytest.mark.slow
def test_a_retune_measures_the_previous_choice_beside_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rows = recorded_rows()
    first = tune(tmp_path, "first", rows)
    assert first.previous is None

    # Nothing changed: the same choice, and no figure.
    again = retune(tmp_path, "again", rows, first)
    assert again.config == first.config
    assert again.previous is not None and again.previous.text == SAME_CONFIGURATION
    comparison, metrics = logged_comparison(again, tmp_path)
    assert comparison["text"] == SAME_CONFIGURATION and comparison["ratios"] == {}
    assert comparison["previous"] == {"study": "first", "run_id": first.mlflow["run_id"]}
    assert not [k for k in metrics if k.startswith(("change.", "against_previous."))]

    # The previous choice got slower: another configuration wins, and the comparison is the
    # ratio of the two as measured in the same rounds (a replay's rounds are exact).
    changed = slower(rows, first.config, 1.3)
    moved = retune(tmp_path, "moved", changed, first)
    assert moved.config != first.config
    compared = moved.previous
    assert compared is not None and not compared.same_configuration
    by_config = {json.dumps(config_of(r), sort_keys=True): r for r in changed}
    now = by_config[json.dumps(moved.config, sort_keys=True)]["latency_p95_ms"]
    before = by_config[json.dumps(first.config, sort_keys=True)]["latency_p95_ms"]
    p95 = compared.ratios["latency_p95_ms"]
    assert p95.ratio == p95.ci_low == p95.ci_high == pytest.approx(now / before)
    assert compared.conditions == "replayed" and "throughput_per_s" in compared.ratios
    assert compared.previous_trial in [f["trial"] for f in moved.revalidation["comparisons"][-1]]
    comparison, metrics = logged_comparison(moved, tmp_path)
    assert comparison["text"] == compared.text
    assert metrics["against_previous.latency_p95_ms.ratio"] == pytest.approx(now / before)
    assert not [k for k in metrics if k.startswith("change.")]
