"""autotune's `jsonl` tracker: each event of a study as one line of JSON appended to
`events.jsonl` beside its tuned file, written as it happens, for a program that follows the
file (`tail -f`) or loads it afterwards. Each line has `event` (start, trial, front,
sensitivity, phase, note), `study` and `at` (Unix seconds), then the event's fields."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from autotune.core.contract.trials import SensitivityTable
from autotune.results.records import Candidate
from autotune.search.observers import Observer, TrialTold
from autotune.search.trackers import TrackerContext, register_tracker

EVENTS_FILE = "events.jsonl"


class JsonLinesTracker(Observer):
    def __init__(self, study: str, path: Path) -> None:
        self.study = study
        self.path = path

    def on_start(self, done: int, total: int | None) -> None:
        self._write("start", done=done, total=total)

    def on_trial(self, trial: TrialTold) -> None:
        record, result = trial.record, trial.shown
        self._write(
            "trial",
            number=record.number,
            status=result.status,
            config=record.config,
            metrics=record.metrics,
            reason=result.reason,
            done=trial.done,
            total=trial.total,
        )

    def on_front(self, front: list[Candidate]) -> None:
        self._write("front", trials=[candidate.trial_number for candidate in front])

    def on_sensitivity(self, table: SensitivityTable) -> None:
        self._write("sensitivity", mode=table.mode, nodes=len(table.nodes))

    def on_phase(self, phase: str) -> None:
        self._write("phase", phase=phase)

    def on_note(self, note: str) -> None:
        self._write("note", note=note)

    def _write(self, event: str, **fields: Any) -> None:
        line = {"event": event, "study": self.study, "at": round(time.time(), 3), **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(line, default=str) + "\n")


@register_tracker("jsonl")
def jsonl_tracker(context: TrackerContext) -> Observer:
    return JsonLinesTracker(context.study, context.out_dir / EVENTS_FILE)
