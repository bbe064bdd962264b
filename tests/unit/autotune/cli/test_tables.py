"""The tables tune, report and status print: a title for each kind of figure (the search's
measurements, the head-to-head's paired rounds), the baseline of the front as the search
measured it, and figures that read at 80 columns: no `None`, no exponent, the thousands
separated, every label whole."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from autotune.cli import tables, tune
from autotune.results.records import Candidate

WIDTH = 80


def _printed(monkeypatch: pytest.MonkeyPatch, print_table: object, *args: object) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=WIDTH, force_terminal=True, color_system=None)
    monkeypatch.setattr(tables, "out", console)
    print_table(*args)  # type: ignore[operator]
    return buffer.getvalue()


BASELINE = {
    "accuracy": 0.95,
    "accuracy_judged_by": None,
    "top1_agreement": None,
    "latency_p95_ms": 2.5,
    "throughput_per_s": 8123.0,
    "energy_per_sample_j": 1.234e-05,
    "energy_source": "estimate",
    "iterations": 12000,
    "latency_p95_ci_ms": [2.41, 2.58],
    "energy_per_1000_samples_j": 0.01234,
}
TUNED = {
    **BASELINE,
    "latency_p95_ms": 0.25,
    "throughput_per_s": 42070.3,
    "energy_per_sample_j": 2.5e-06,
    "energy_per_1000_samples_j": 0.0025,
    "co2e_g_per_million_samples": 1.5,
}


def test_the_head_to_head_table_reads_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _printed(monkeypatch, tables._print_comparison, BASELINE, TUNED)
    assert "Head to head (paired rounds)" in text
    assert "None" not in text and "…" not in text
    assert "e+" not in text and "e-0" not in text
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert "accuracy judged by" not in rows  # neither has it
    cells = rows["energy per 1,000 samples, J"].split("│")[2:4]
    assert [cell.strip() for cell in cells] == ["0.01234", "0.0025"]
    assert "42,070" in rows["throughput, samples/s"] and "8,123" in rows["throughput, samples/s"]
    assert "12,000" in rows["timed iterations"]
    assert "2.41–2.58" in rows["p95 latency 95% CI, ms"]
    assert "n/a" in rows["CO2e per 1M samples, g"]  # the baseline has none


def _candidate(number: int, p95: float) -> Candidate:
    metrics = {
        "accuracy": 0.95,
        "latency_p95_ms": p95,
        "throughput_per_s": 42070.3,
        "energy_per_sample_j": 1.234e-05,
    }
    return Candidate(number, {"batch.size": 1 + number}, metrics, feasible=True)


def test_the_front_shows_the_searchs_baseline_under_its_own_title(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searched, remeasured, chosen = _candidate(0, 2.5), _candidate(0, 2.7), _candidate(3, 0.5)
    outcome = SimpleNamespace(baseline=remeasured, candidates=[searched, chosen])
    baseline = tune.searched_baseline(outcome)  # type: ignore[arg-type]
    assert baseline is searched
    text = _printed(monkeypatch, tables._print_front, [chosen], 3, baseline)
    assert text.startswith("Pareto front (search measurements): 1 feasible")
    assert "2.500" in text and "2.700" not in text
    assert "42,070" in text and "0.00001234" in text
    assert "e+" not in text and "e-0" not in text
