"""Several kinds of node tuned at once, without a cluster: each kind's study in its thread,
stopped by one signal and interrupted by a second; one kind's failure is its outcome only;
the list file names each kind's outcome, and loading a kind that was not tuned says why."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from autotune.cli import tune
from autotune.conclusion.tuned_file import ConstraintOutcome, TunedIndex, TunedKind, tuned_for_kind
from autotune.core.contract import NodeInfo, NodeKind
from autotune.core.errors import AutotuneError, Interrupted, NoFeasibleConfiguration
from autotune.kinds_at_once import (
    KindEnd,
    KindNotTuned,
    KindStudy,
    KindTuned,
    tune_at_once,
    write_index,
)
from autotune.search.interrupts import stop_on_signals
from autotune.space.hardware import load_profile
from autotune.space.search_space import SPACES_DIR

PROFILES = SPACES_DIR / "profiles"


def kind_of(profile_name: str) -> NodeKind:
    profile = load_profile(PROFILES / profile_name)
    node = NodeInfo(node_id=profile_name, hostname="h", labels={}, cpus=8, gpus=1, slots=1)
    return NodeKind(profile=profile, nodes=[node])


A100, H200 = kind_of("a100.json"), kind_of("h200x8.json")


def study(kind: NodeKind, run, closest=dict) -> KindStudy:  # type: ignore[no-untyped-def]
    return KindStudy(kind, f"s@{kind.fingerprint}", run, closest)


def signal_later(*delays_s: float) -> None:
    """SIGINT to this process after each delay, from another thread (the main one waits)."""

    def send() -> None:
        for delay in delays_s:
            time.sleep(delay)
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()


def test_a_signal_stops_the_study_of_every_thread() -> None:
    seen: list[list[str]] = []

    def study_thread() -> None:
        stop = threading.Event()
        with stop_on_signals(stop) as received:
            stop.wait(20)
            seen.append(list(received))

    with stop_on_signals(threading.Event()):
        threads = [threading.Thread(target=study_thread) for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)
        for thread in threads:
            thread.join(30)
    assert seen == [["SIGINT"], ["SIGINT"]]


def test_one_kinds_failure_is_its_outcome_and_the_other_kinds_study_goes_on() -> None:
    failed = threading.Event()

    def fails() -> KindTuned:
        failed.set()
        raise RuntimeError("a bug in one kind's study")

    def infeasible_after_the_other_failed() -> KindTuned:
        assert failed.wait(20)
        raise NoFeasibleConfiguration("none of 3 measured configurations meets the constraints")

    def closest() -> dict[str, ConstraintOutcome]:
        return {"max_latency_p95_ms": ConstraintOutcome(bound=2.0, value=2.5, met=False)}

    ends = tune_at_once(
        [study(A100, fails), study(H200, infeasible_after_the_other_failed, closest)],
        threading.Event(),
        lambda: None,
    )
    assert [(e.kind, e.status) for e in ends if isinstance(e, KindNotTuned)] == [
        (A100, "failed"),
        (H200, "infeasible"),
    ]
    assert isinstance(ends[0], KindNotTuned) and isinstance(ends[1], KindNotTuned)
    assert ends[0].reason == "RuntimeError: a bug in one kind's study"
    assert ends[1].reason.endswith("no configuration met max_latency_p95_ms 2 (closest 2.5)")


def test_a_first_signal_stops_every_kinds_study_and_a_second_interrupts_them() -> None:
    stop, closed = threading.Event(), threading.Event()

    def stops_when_told() -> KindTuned:
        assert stop.wait(20)
        raise Interrupted("stopped by SIGINT after the running trials")

    signal_later(0.3)
    ends = tune_at_once(
        [study(A100, stops_when_told), study(H200, stops_when_told)], stop, closed.set
    )
    assert [(e.status, e.reason) for e in ends if isinstance(e, KindNotTuned)] == [
        ("interrupted", "stopped by SIGINT after the running trials")
    ] * 2
    unwound: list[BaseException] = []

    def runs_on() -> KindTuned:
        try:
            while True:
                time.sleep(0.05)
        except BaseException as error:
            unwound.append(error)
            raise

    signal_later(0.3, 0.3)
    with pytest.raises(KeyboardInterrupt):
        tune_at_once([study(A100, runs_on), study(H200, runs_on)], threading.Event(), closed.set)
    assert closed.is_set()
    assert [type(error) for error in unwound] == [KeyboardInterrupt, KeyboardInterrupt]


def listed(tmp_path: Path, kind: NodeKind, status: str, reason: str) -> Path:
    ends: list[KindEnd] = [
        KindNotTuned(kind, f"s@{kind.fingerprint}", status, reason),  # type: ignore[arg-type]
        KindNotTuned(H200, f"s@{H200.fingerprint}", "failed", "the baseline failed"),
    ]
    path = tmp_path / "s" / "tuned.yaml"
    write_index(path, ends)
    return path


@pytest.mark.parametrize(
    ("status", "error"),
    [
        ("infeasible", NoFeasibleConfiguration),
        ("failed", AutotuneError),
        ("interrupted", Interrupted),
    ],
)
def test_loading_a_kind_that_was_not_tuned_says_how_its_study_ended(
    tmp_path: Path, status: str, error: type[AutotuneError]
) -> None:
    path = listed(tmp_path, A100, status, "what happened")
    with pytest.raises(error) as info:
        tuned_for_kind(path, A100.fingerprint)
    told = str(info.value)
    assert f"this machine's kind {A100.fingerprint}" in told
    assert f"its study s@{A100.fingerprint}" in told and told.endswith("what happened")


def test_a_listed_kind_is_tuned_with_its_file_or_says_why_not() -> None:
    with pytest.raises(ValueError, match="tuned: a tuned kind names its tuned file"):
        TunedKind(fingerprint="a", hardware="1 core", study="s@a")
    with pytest.raises(ValueError, match="reason: a kind that is failed says why"):
        TunedKind(fingerprint="a", hardware="1 core", study="s@a", outcome="failed")
    with pytest.raises(ValueError, match="tuned: a tuned kind names"):
        TunedKind(fingerprint="a", hardware="h", study="s", outcome="failed", reason="x", tuned="t")
    old = {"fingerprint": "a", "hardware": "1 core", "study": "s@a", "tuned": "a.yaml"}
    assert TunedIndex.model_validate({"kinds": [old, {**old, "fingerprint": "b"}]})


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        (["tuned", "tuned"], 0),
        (["tuned", "infeasible"], 3),
        (["infeasible", "infeasible"], 3),
        (["infeasible", "interrupted"], 130),
        (["tuned", "interrupted"], 130),
        (["failed", "interrupted"], 1),
        (["tuned", "failed"], 1),
    ],
)
def test_several_kinds_exit_zero_only_when_every_kind_is_tuned(
    statuses: list[str], code: int
) -> None:
    ends = [
        KindNotTuned(A100, "s", s, "why")  # type: ignore[arg-type]
        if s != "tuned"
        else KindTuned(A100, SimpleNamespace(), Path("t.yaml"))  # type: ignore[arg-type]
        for s in statuses
    ]
    assert tune.kinds_exit_code(ends) == code


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


def test_without_a_terminal_each_kinds_lines_start_with_the_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = console(monkeypatch, terminal=False)
    display = tune._TuneProgress()
    a, b = display.for_kind("kind aaaaaaaa"), display.for_kind("kind bbbbbbbb")
    with a.trials(6) as tell_a, b.trials(6) as tell_b:
        tell_a(1, RESULT)
        tell_b(2, RESULT)
        b.note("start: loading and inspecting the model on a trial worker")
        a.phase("head to head: the baseline and finalists [4] in 6 interleaved rounds")
    assert out.getvalue().splitlines() == [
        "[kind aaaaaaaa] tuning 1/6: trial 4: ok, p95 0.060 ms in 1.2 s (build 0.5, accuracy "
        "0.2, timing 0.5)",
        "[kind bbbbbbbb] tuning 2/6: trial 4: ok, p95 0.060 ms in 1.2 s (build 0.5, accuracy "
        "0.2, timing 0.5)",
        "[kind bbbbbbbb] start: loading and inspecting the model on a trial worker",
        "[kind aaaaaaaa] head to head: the baseline and finalists [4] in 6 interleaved rounds",
    ]


def test_on_a_terminal_each_kind_has_its_own_bar_in_one_display(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = console(monkeypatch, terminal=True)
    display = tune._TuneProgress()
    a, b = display.for_kind("kind aaaaaaaa"), display.for_kind("kind bbbbbbbb")
    with a.trials(6) as tell_a:
        with b.trials(4) as tell_b:
            tell_a(3, RESULT)
            tell_b(4, RESULT)
            a.phase("export: the optimized model")
        tell_a(6, None)
    last_frame = out.getvalue().split("\r")[-1]
    assert "kind aaaaaaaa tuning" in last_frame and " 6/6 " in last_frame
    assert "kind bbbbbbbb tuning" in last_frame and " 4/4 " in last_frame
    assert "kind aaaaaaaa export" in last_frame
