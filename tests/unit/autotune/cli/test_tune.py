"""The tune command's progress: a bar on a terminal, a line for each trial and each phase
anywhere else (a log file stays readable), and a resumed study's count from its start."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from autotune.cli import tune

RESULT = SimpleNamespace(
    trial_number=4,
    status="ok",
    reason=None,
    metrics=SimpleNamespace(latency_p95_ms=0.0601),
    duration_s=1.25,
    times=SimpleNamespace(build_s=0.5, accuracy_s=0.25, timing_s=0.5),
    provenance=None,
)


def console(monkeypatch: pytest.MonkeyPatch, terminal: bool) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(tune, "err", Console(file=out, force_terminal=terminal, width=160))
    return out


def test_without_a_terminal_each_trial_and_phase_is_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    out = console(monkeypatch, terminal=False)
    progress = tune._TuneProgress()
    with progress.trials(16) as update:
        update(5, RESULT)
        update(5, None)  # a resumed study's count: no trial to tell
    progress.phase("head to head: the baseline and finalists [4, 2] in 6 interleaved rounds")
    lines = out.getvalue().splitlines()
    assert lines == [
        "tuning 5/16: trial 4: ok, p95 0.060 ms in 1.2 s (build 0.5, accuracy 0.2, timing 0.5)",
        "head to head: the baseline and finalists [4, 2] in 6 interleaved rounds",
    ]


def test_a_resumed_study_shows_its_done_trials_on_the_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    out = console(monkeypatch, terminal=True)
    progress = tune._TuneProgress()
    with progress.trials(40) as update:
        update(40, None)
    last_frame = out.getvalue().split("\r")[-1]
    assert " 40/40 " in last_frame


def test_a_trial_that_waited_for_quiet_says_how_long(monkeypatch: pytest.MonkeyPatch) -> None:
    out = console(monkeypatch, terminal=False)
    waited = SimpleNamespace(contention=SimpleNamespace(waited_s=10.02, contended=True))
    with tune._TuneProgress().trials(16) as update:
        update(6, SimpleNamespace(**{**vars(RESULT), "provenance": waited}))
    assert (
        out.getvalue()
        .rstrip()
        .endswith(", waited 10 s for quiet; still busy, measured marked contended")
    )


def _screen(raw: str) -> list[str]:
    """What a terminal shows after rich's output: its lines, after the cursor moves and
    line clears of a live display."""
    text = re.sub(r"\x1b\[[0-9;]*m|\x1b\[\?25[lh]", "", raw)
    lines, row = [""], 0
    for token in re.split(r"(\r|\n|\x1b\[2K|\x1b\[1A)", text):
        if token == "\n":
            row += 1
            lines += [""] * (row + 1 - len(lines))
        elif token == "\x1b[2K":
            lines[row] = ""
        elif token == "\x1b[1A":
            row -= 1
        elif token != "\r":
            lines[row] += token
    return [line.rstrip() for line in lines if line.strip()]


def test_at_80_columns_the_trials_scroll_above_a_whole_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(tune, "err", Console(file=out, force_terminal=True, width=80))
    progress = tune._TuneProgress()
    with progress.trials(16) as update:
        update(5, RESULT)
        update(6, SimpleNamespace(**{**vars(RESULT), "trial_number": 5}))
    screen = _screen(out.getvalue())
    assert screen[:2] == [
        "tuning 5/16: trial 4: ok, p95 0.060 ms in 1.2 s (build 0.5, accuracy 0.2, timing 0.5)",
        "tuning 6/16: trial 5: ok, p95 0.060 ms in 1.2 s (build 0.5, accuracy 0.2, timing 0.5)",
    ]
    (bar,) = screen[2:]
    assert re.fullmatch(r"tuning +━+╸?━* 6/16 0:00:\d\d", bar), bar
