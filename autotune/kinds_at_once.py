"""Several kinds of node tuned at once: each kind's study in a thread of its own, on its own
nodes; how each ended (tuned, infeasible, failed, interrupted), and the list of them that
`autotune.load` opens. One kind's failure never stops another's study."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from autotune.conclusion.conclude import TuneOutcome
from autotune.conclusion.tuned_file import ConstraintOutcome, TunedIndex, TunedKind
from autotune.core.contract import NodeKind
from autotune.core.errors import AutotuneError, Interrupted, NoFeasibleConfiguration
from autotune.search.interrupts import interrupt_thread, stop_on_signals
from autotune.space.hardware import describe_hardware

logger = logging.getLogger(__name__)

ProgressFactory = Callable[[int | None], AbstractContextManager[Callable[[int, Any], None]]]

# How often the main thread wakes while the studies run (its signal handler runs then too).
JOIN_EVERY_S = 0.5
# After a second signal, how long the studies get to unwind before it is raised anyway.
UNWIND_S = 30.0


class KindDisplay(Protocol):
    """What one kind's study tells while several kinds are tuned at once."""

    def trials(self, total: int | None) -> AbstractContextManager[Callable[[int, Any], None]]: ...

    def note(self, text: str) -> None: ...

    def phase(self, text: str) -> None: ...


@dataclass
class LabelledLines:
    """A kind's display where the caller has none of its own: its notes and phases told
    with the kind's label in front, its trials to the caller's progress."""

    label: str
    on_note: Callable[[str], None] | None
    on_phase: Callable[[str], None] | None
    progress: ProgressFactory | None

    def trials(self, total: int | None) -> AbstractContextManager[Callable[[int, Any], None]]:
        if self.progress is None:
            return nullcontext(lambda done, result: None)
        return self.progress(total)

    def note(self, text: str) -> None:
        if self.on_note is not None:
            self.on_note(f"[{self.label}] {text}")

    def phase(self, text: str) -> None:
        if self.on_phase is not None:
            self.on_phase(f"[{self.label}] {text}")


def kind_label(kind: NodeKind) -> str:
    """A kind in a dozen characters, for the lines and bars of several kinds at once."""
    return f"kind {kind.fingerprint[:8]}"


@dataclass
class KindTuned:
    """One kind of node's study: what it concluded and where its tuned file is."""

    kind: NodeKind
    outcome: TuneOutcome
    path: Path


@dataclass
class KindNotTuned:
    """One kind of node whose study gave no tuned configuration, and why."""

    kind: NodeKind
    study: str
    status: Literal["infeasible", "failed", "interrupted"]
    reason: str
    constraints: dict[str, ConstraintOutcome] | None = None


KindEnd = KindTuned | KindNotTuned


@dataclass
class KindStudy:
    """One kind's study, to run in a thread of its own: `run` tunes it (raising where it
    concludes nothing); `closest` reads, once it was infeasible, how close it came to each
    bound."""

    kind: NodeKind
    name: str
    run: Callable[[], KindTuned]
    closest: Callable[[], dict[str, ConstraintOutcome]]


def tune_at_once(
    studies: list[KindStudy], stop: threading.Event, close: Callable[[], None]
) -> list[KindEnd]:
    """Every study at once, each in its thread; how each ended, in order. A first SIGINT or
    SIGTERM sets `stop`: every study stops asking and its running trials finish. A second
    interrupts every study at once (`close` ends their running trials) and is raised here
    as KeyboardInterrupt, as it is where one study runs in the main thread."""
    threads = [_KindThread(study) for study in studies]
    with stop_on_signals(stop):
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while not thread.done.wait(JOIN_EVERY_S):
                    pass
        except KeyboardInterrupt:
            _interrupt(threads, close)
            raise
    return [thread.ended() for thread in threads]


def _interrupt(threads: list[_KindThread], close: Callable[[], None]) -> None:
    for thread in threads:
        if not thread.done.is_set():
            interrupt_thread(thread)
    close()  # wakes the threads that wait for a running trial
    deadline = time.monotonic() + UNWIND_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


class _KindThread(threading.Thread):
    """A kind's study. While signals may come, its end is waited for on `done`, not by
    `join`: a join that a signal handler's exception interrupts can take the thread for
    ended while it runs on."""

    def __init__(self, study: KindStudy) -> None:
        super().__init__(name=f"study {study.name}", daemon=True)
        self.study = study
        self.end: KindEnd | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.end = _ended(self.study)
        except BaseException as error:  # the KeyboardInterrupt of a second signal
            self.error = error
        finally:
            self.done.set()

    def ended(self) -> KindEnd:
        if self.error is not None:
            raise self.error
        assert self.end is not None
        return self.end


def _ended(study: KindStudy) -> KindEnd:
    """How a kind's study ended: any exception of its own is its outcome, not the tuning's."""
    kind, name = study.kind, study.name
    try:
        try:
            return study.run()
        except NoFeasibleConfiguration as error:
            closest = study.closest()
            return KindNotTuned(kind, name, "infeasible", _infeasible(error, closest), closest)
    except Interrupted as error:
        return KindNotTuned(kind, name, "interrupted", str(error))
    except AutotuneError as error:
        return KindNotTuned(kind, name, "failed", str(error))
    except Exception as error:
        logger.error("study %s failed", name, exc_info=error)
        return KindNotTuned(kind, name, "failed", f"{type(error).__name__}: {error}")


def _infeasible(error: NoFeasibleConfiguration, closest: dict[str, ConstraintOutcome]) -> str:
    """The error, and the bounds no measured configuration met, each with the value closest
    to it."""
    unmet = [f"{n} {c.bound:g} (closest {c.value:g})" for n, c in closest.items() if not c.met]
    if not unmet:
        return f"{error}; each bound is met by some configuration, but none meets them all"
    return f"{error}; no configuration met {', '.join(unmet)}"


def status(end: KindEnd) -> str:
    """How a kind's study ended: tuned, infeasible, failed or interrupted."""
    return "tuned" if isinstance(end, KindTuned) else end.status


def write_index(path: Path, ends: list[KindEnd]) -> None:
    """The list of each kind and how its study ended, where `autotune.load` finds its
    machine's tuned file or why there is none."""
    kinds = [_listed(end, path) for end in ends]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TunedIndex(kinds=kinds).to_yaml(), encoding="utf-8")


def _listed(end: KindEnd, index: Path) -> TunedKind:
    fingerprint, hardware = end.kind.fingerprint, describe_hardware(end.kind)
    if isinstance(end, KindTuned):
        relative = os.path.relpath(end.path.resolve(), index.resolve().parent)
        study = end.outcome.study_name
        return TunedKind(fingerprint=fingerprint, hardware=hardware, study=study, tuned=relative)
    return TunedKind(
        fingerprint=fingerprint,
        hardware=hardware,
        study=end.study,
        outcome=end.status,
        reason=end.reason,
        constraints=end.constraints,
    )
