"""Bounds no configuration meets: each named with the best value reached, how far that is
from the bound, and the bound that value would meet; and figures as a person reads them."""

from __future__ import annotations

import pytest

from autotune.conclusion.unmet import infeasible_message
from autotune.core.metrics import BOUNDS, constraint_violations
from autotune.results.records import Candidate
from autotune.search.unmet import figure, unmet_bounds, unmet_note

CONSTRAINTS = {"min_throughput_per_s": 1500.0, "max_accuracy_drop": 0.02}


def _measured(number: int, throughput: float, drop: float) -> Candidate:
    metrics = {"throughput_per_s": throughput, "accuracy_drop": drop}
    violations = constraint_violations(CONSTRAINTS, metrics)
    feasible = all(v <= 0 for v in violations.values())
    return Candidate(number, {}, metrics, feasible, violations)


def test_a_bound_no_configuration_meets_is_named_with_the_best_reached() -> None:
    candidates = [_measured(0, 7.142857, 0.0), _measured(1, 5.0, 0.01)]
    message = infeasible_message(candidates, CONSTRAINTS)
    assert message == (
        "none of 2 measured configurations meets the constraints: min_throughput_per_s 1,500 "
        "is met by none of them: the best reached is 7.143 samples/s (trial 0), 210× below "
        "the bound; constraints.min_throughput_per_s: 7.142 would be met"
    )


def test_an_upper_bound_says_how_many_times_over_it_the_best_is() -> None:
    candidates = [_measured(0, 2000.0, 0.0501), _measured(3, 2000.0, 0.0412)]
    (unmet,) = unmet_bounds(candidates, CONSTRAINTS)
    assert (unmet.name, unmet.best, unmet.trial) == ("max_accuracy_drop", 0.0412, 3)
    assert unmet.said("none") == (
        "max_accuracy_drop 0.02 is met by none: the best reached is 0.0412 (trial 3), 2.06× "
        "the bound"
    )


@pytest.mark.parametrize(
    ("name", "best"), [("min_throughput_per_s", 7.1428571), ("max_accuracy_drop", 0.0412345)]
)
def test_the_bound_said_to_be_met_is_met_by_the_best(name: str, best: float) -> None:
    metrics = {"throughput_per_s": best, "accuracy_drop": best}
    (unmet,) = [
        u
        for u in unmet_bounds(
            [Candidate(0, {}, metrics, False, constraint_violations(CONSTRAINTS, metrics))],
            CONSTRAINTS,
        )
        if u.name == name
    ]
    loosened = unmet.meeting_bound()
    assert BOUNDS[name].violation(loosened, best) <= 0
    assert loosened != pytest.approx(CONSTRAINTS[name])


def test_bounds_each_met_by_some_configuration_but_not_together() -> None:
    candidates = [_measured(0, 2000.0, 0.05), _measured(1, 10.0, 0.0)]
    assert unmet_bounds(candidates, CONSTRAINTS) == []
    assert unmet_note(candidates, CONSTRAINTS) is None
    assert infeasible_message(candidates, CONSTRAINTS).endswith(
        ": each bound is met by some configuration, but none meets them all"
    )


def test_the_note_names_each_bound_met_by_none_so_far() -> None:
    note = unmet_note([_measured(0, 400.0, 0.03)], CONSTRAINTS)
    assert note == (
        "note: min_throughput_per_s 1,500 is met by no configuration so far: the best reached "
        "is 400 samples/s (trial 0), 3.75× below the bound; max_accuracy_drop 0.02 is met by "
        "no configuration so far: the best reached is 0.03 (trial 0), 1.5× the bound"
    )


def test_a_configuration_not_judged_against_the_bounds_is_left_out() -> None:
    screened = Candidate(5, {}, {"throughput_per_s": 9e9, "accuracy_drop": 0.0}, False, {})
    assert unmet_bounds([screened], CONSTRAINTS) == []


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (42070.3, "42,070"),
        (7.142857, "7.143"),
        (0.02, "0.02"),
        (0.0001234, "0.0001234"),
        (1e9, "1,000,000,000"),
        (0.0, "0"),
    ],
)
def test_figures_have_no_exponent_and_separated_thousands(value: float, shown: str) -> None:
    assert figure(value) == shown
