from __future__ import annotations

from typing import Any

from experiments.user_models_recheck import describe_recheck

FIGURES = {"throughput": 2.5, "throughput_ci": [2.1, 2.9], "p95": 1.4, "rounds": 12,
           "other_load": 0.25}  # fmt: skip


def _tuned(throughput: tuple[float, float], p95: tuple[float, float]) -> dict[str, Any]:
    def ratio(bounds: tuple[float, float]) -> dict[str, float]:
        return {"ratio": sum(bounds) / 2, "ci_low": bounds[0], "ci_high": bounds[1]}

    return {
        "headline": {
            "ratios": {"throughput_per_s": ratio(throughput), "latency_p95_ms": ratio(p95)}
        }
    }


def test_the_recheck_says_which_headline_intervals_hold_it() -> None:
    text = describe_recheck(_tuned((2.0, 3.0), (1.5, 2.0)), FIGURES)
    assert text.startswith("throughput 2.5× (95% CI 2.1–2.9×), p95 per call 1.4×; 12 alternating")
    assert "other processes used 25% of the cores" in text
    assert text.endswith("headline interval: throughput held, p95 not held")


def test_a_headline_without_ratios_is_shown_without_a_verdict() -> None:
    text = describe_recheck({"headline": {"ratios": None}}, FIGURES)
    assert "held" not in text


def test_a_failed_recheck_is_shown_with_its_error() -> None:
    assert describe_recheck(_tuned((1, 2), (1, 2)), {"error": "boom"}) == "failed: boom"
