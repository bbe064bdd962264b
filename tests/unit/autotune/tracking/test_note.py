"""The descriptions a reviewer reads in MLflow: the parent run's and the experiment's."""

from __future__ import annotations

import re

from autotune.core.metrics import OBJECTIVES
from autotune.tracking.note import experiment_note, figures_block, header_lines, review_note
from autotune.tracking.review import points
from tests.review_study import (
    CANDIDATES,
    CLOUD,
    OBJECTIVE_METRICS,
    REQUEST,
    TUNED,
)

LINKS = [("every trial with its figures", "#/experiments/3/runs?x=1")]
# What MLflow's description column shows of a fixed-width line without cutting it, at the
# least (the parent run's page at 1600 pixels: about 70 characters).
FITS = 70


def blocks(note: str) -> list[list[str]]:
    """The fenced blocks of a note, each as its lines."""
    return [b.strip("\n").splitlines() for b in re.findall(r"```\n(.*?)```", note, re.S)]


def test_the_description_explains_the_choice_beside_the_baseline() -> None:
    note = review_note("digits", TUNED, CLOUD, OBJECTIVE_METRICS, REQUEST, LINKS)
    assert note.startswith("## autotune study `digits`")
    assert TUNED["headline"]["text"] in note
    assert "[every trial with its figures](#/experiments/3/runs?x=1)" in note.split("\n\n")[2]
    assert "`models/net.onnx`" in note
    assert "**Why this one:** lowest latency among the finalists" in note
    assert "**Chosen configuration** #2: `batch.size=4`, `runtime.engine=onnxruntime`" in note
    choice, front = blocks(note)
    assert choice[2].split() == ["chosen", "#2", "0.9800", "0.070", "5.00e-04", "20000", "0.0100"]
    assert choice[3].split() == ["baseline", "#0", "0.9900", "2.000", "2.00e-02", "500", "0.0000"]
    assert [r.split() for r in front[2:]] == [
        ["#1", "0.9900", "0.500", "5.00e-03"],
        ["#2", "chosen", "0.9800", "0.050", "5.00e-04"],
    ]
    assert "- **#2** (chosen): size=4" in note


def test_the_columns_are_set_apart_and_their_names_are_whole() -> None:
    """MLflow draws a Markdown table without borders or padding ("energy_per_sample_j
    throughput_per_s" run together): the figures are fixed-width blocks under two-line headers
    of a few words, each line short enough for the description's column."""
    note = review_note("digits", TUNED, CLOUD, OBJECTIVE_METRICS, REQUEST, LINKS)
    assert "|---" not in note and "| **chosen** |" not in note
    choice, front = blocks(note)
    assert choice[0].split() == ["p95", "ms", "J", "per", "samples", "accuracy"]
    assert choice[1].split() == ["accuracy", "per", "call", "sample", "per", "s", "drop"]
    assert all(len(line) <= FITS for line in choice + front)
    columns = [m.end() for m in re.finditer(r"\S+", choice[2])]
    assert columns[2:] == [m.end() for m in re.finditer(r"\S+", choice[3])][2:]  # right-aligned


def test_each_figure_of_the_chosen_one_says_where_it_comes_from() -> None:
    """Its p95 is 0.070 head to head and 0.050 in the search: each figure names its source."""
    note = review_note("digits", TUNED, CLOUD, OBJECTIVE_METRICS, REQUEST, LINKS)
    choice_title = next(line for line in note.splitlines() if line.startswith("**Beside"))
    assert "re-measured head to head (10 paired rounds" in choice_title
    assert "the chosen configuration's figures are from its confirming rounds" in choice_title
    assert "the baseline's from the rounds that decided" in choice_title
    front_title = next(line for line in note.splitlines() if "Pareto front" in line)
    assert "figures from the search" in front_title
    assert "the chosen one's head-to-head figures are above" in front_title
    choice, front = blocks(note)
    assert "0.070" in choice[2] and "0.050" in front[3]
    deciding = {**TUNED, "revalidation": {**TUNED["revalidation"], "confirmation": None}}
    assert "both from the rounds that decided" in review_note(
        "digits", deciding, CLOUD, OBJECTIVE_METRICS, REQUEST
    )


def test_the_constraints_are_listed_once() -> None:
    note = review_note("digits", TUNED, CLOUD, OBJECTIVE_METRICS, REQUEST, LINKS)
    assert note.count("max_accuracy_drop") == 1 and note.count("max_latency_p95_ms") == 1
    assert (
        "**Constraints** (the chosen configuration, head to head): "
        "max_accuracy_drop ≤ 0.0100: 0.0100 (met); max_latency_p95_ms ≤ 2.000: 0.070 (met)"
    ) in note


def test_a_study_without_a_feasible_configuration_says_so() -> None:
    infeasible = points(CANDIDATES, [], baseline=0, chosen=None)
    note = review_note("digits", None, infeasible, OBJECTIVE_METRICS, REQUEST)
    assert "**No configuration met the constraints.**" in note
    assert "- **Constraints:** max_accuracy_drop ≤ 0.0100, max_latency_p95_ms ≤ 2.000" in note
    assert "**Every measured configuration** (5 configurations), figures from the search" in note
    assert [line.split()[0] for line in blocks(note)[0][2:]] == ["#0", "#1", "#2", "#3", "#4"]


def test_a_header_takes_two_short_lines() -> None:
    assert header_lines(OBJECTIVES["latency"]) == ("p95 ms", "per call")
    assert header_lines(OBJECTIVE_METRICS[0]) == ("", "accuracy")
    from autotune.core.metrics import METRICS

    assert header_lines(METRICS["accuracy_drop"]) == ("accuracy", "drop")
    assert header_lines(METRICS["latency_p99_ms"]) == ("p99 latency", "per call")
    assert figures_block([OBJECTIVES["latency"]], [("a", {})]) == [
        "```",
        "     p95 ms",
        "   per call",
        "a         —",
        "```",
    ]


def test_the_experiment_s_description_starts_with_the_latest_study_s_links() -> None:
    links = [("every trial with its figures", "#/a"), ("the trade-off as charts", "#/b")]
    first = experiment_note(None, "one", links)
    assert first == (
        "autotune study one: [every trial with its figures](#/a) · [the trade-off as charts](#/b)\n"
    )
    second = experiment_note(first + "\nSomeone's own words.\n", "two", [("table", "#/c")])
    assert second.split("\n\n") == [
        "autotune study two: [table](#/c)",
        first.strip(),
        "Someone's own words.\n",
    ]
    again = experiment_note(second, "one", [("table", "#/d")])
    assert again.split("\n\n")[:2] == [
        "autotune study one: [table](#/d)",
        second.split("\n\n")[0],
    ]
    assert again.count("autotune study one") == 1


def test_a_kept_baseline_is_one_row() -> None:
    kept = {
        **TUNED,
        "metrics": TUNED["baseline"],
        "study": {"trial_number": 0},
        "revalidation": {**TUNED["revalidation"], "chosen": 0, "confirmation": None},
    }
    cloud = points(CANDIDATES, CANDIDATES[1:3], baseline=0, chosen=0)
    (choice, _) = blocks(review_note("digits", kept, cloud, OBJECTIVE_METRICS, REQUEST))
    assert [line.split()[:4] for line in choice[2:]] == [["chosen", "#0", "=", "baseline"]]
