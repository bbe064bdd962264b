"""How far a trial travels between autotune's modules, and how often it computes each fact.

    .venv/bin/python experiments/trial_path.py [--trials 2 4] [--json FIGURES.json]
        [--before BEFORE.json] [--write]

Runs a short real tuning of the digits request (the tests' fast measurement settings) in
this process on the in-process executor, with MLflow tracking on a fresh SQLite store, under
a profiler (`sys.setprofile` and `threading.setprofile`, so the tracker's writer thread is
seen too). It runs once per trial budget given (default 2 and 4), each in a fresh interpreter
(nothing cached by one tuning serves the next): what grows with the budget is per trial, what
does not is per tuning.

Definitions:
- module: the dotted name of a Python module under autotune/ or workers/ (the `__name__` of
  the function's globals), e.g. `workers.runner`.
- hop: a call whose callee function is in such a module and whose caller is in another one.
  The caller is the nearest frame on the stack that is in autotune/ or workers/, so a call
  that reaches autotune through a library (Optuna's callbacks, a thread's start) still counts
  from the module that handed it over. `hops` is the number of distinct caller->callee module
  pairs (edges) over the whole tuning; `hop calls` the number of such calls. A module's body
  run by an import is not a call. `path hops` leave out the edges into or out of
  autotune.core (the contract, knobs and metrics every module speaks).
- back-and-forth: an unordered pair of modules {A, B} with edges both ways (A calls into B
  and B calls into A): the two modules hand the same path back and forth.
- facts: calls of the functions named in `FACTS` (the module and the function's qualified
  name), and MLflow writes per run: calls of MlflowClient's writing methods in this process,
  grouped by the run they write to; a trial's run is a child run tagged with its trial number.
  The tracker writes each trial's run first in a writer process of its own, which the profiler
  does not see: each run queued to it (`ProcessWriter.submit`) is one more write of that run.

Without --before it prints one column (the figures now); with it, the figures of BEFORE.json
beside these. --write puts the table, the edges and the machine (lscpu's model name and the
cores this process may use) in experiments/results/trial-path.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import digits_request  # noqa: E402

OURS = ("autotune", "workers")
SHARED = "autotune.core."
RESULTS = REPO / "experiments" / "results" / "trial-path.md"

# (label, module, qualified name): the facts a trial should compute once and pass on.
FACTS: list[tuple[str, str, str]] = [
    ("node probed (probe)", "workers.building.probe", "probe"),
    ("node kind chosen (select_kinds)", "autotune.space.hardware", "select_kinds"),
    ("executor kinds asked (kinds)", "autotune.execution.in_process", "InProcessExecutor.kinds"),
    ("node kind made (NodeKind.one_node)", "autotune.core.contract.hardware", "NodeKind.one_node"),
    ("support check (knobs supports)", "autotune.core.knobs.base", "supports"),
    ("runtime check (check_runtime)", "workers.building.runtimes", "check_runtime"),
    ("configuration parsed (parse_config)", "autotune.core.knobs.config", "parse_config"),
    ("derived metrics (derived)", "autotune.core.metrics", "derived"),
    ("derived metrics (with_derived)", "autotune.core.metrics", "with_derived"),
    ("worker: trial", "workers.actor", "TrialWorker.run"),
    ("worker: head-to-head", "workers.actor", "TrialWorker.compare"),
    ("worker: export", "workers.actor", "TrialWorker.export"),
    (
        "MLflow trial runs queued to the writer process",
        "autotune.tracking.writer",
        "ProcessWriter.submit",
    ),
    ("MLflow trial runs written here", "autotune.tracking.writer", "InlineWriter.submit"),
]
MLFLOW_CLIENT = "mlflow.tracking.client"
MLFLOW_WRITES = {
    "MlflowClient.create_run",
    "MlflowClient.log_batch",
    "MlflowClient.log_metric",
    "MlflowClient.log_param",
    "MlflowClient.set_tag",
    "MlflowClient.log_text",
    "MlflowClient.log_dict",
    "MlflowClient.log_artifact",
    "MlflowClient.log_artifacts",
    "MlflowClient.set_terminated",
    "MlflowClient.update_run",
}


def _ours(module: str) -> bool:
    return module.split(".", 1)[0] in OURS


@dataclass
class Recorder:
    """What the profiler saw: module edges, fact calls, MLflow writes per run."""

    edges: Counter[tuple[str, str]] = field(default_factory=Counter)
    facts: Counter[str] = field(default_factory=Counter)
    fact_callers: Counter[tuple[str, str]] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.fact_by_code = {(module, name): label for label, module, name in FACTS}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module == MLFLOW_CLIENT:
            self._mlflow(frame)
            return
        if not _ours(module) or frame.f_code.co_name == "<module>":
            return  # an import runs a module's body: not a step of the trial
        caller = _caller_module(frame.f_back)
        label = self.fact_by_code.get((module, frame.f_code.co_qualname))
        with self.lock:
            if caller is not None and caller != module:
                self.edges[(caller, module)] += 1
            if label is not None:
                self.facts[label] += 1
                self.fact_callers[(label, caller or "outside")] += 1

    def _mlflow(self, frame: FrameType) -> None:
        if frame.f_code.co_qualname not in MLFLOW_WRITES:
            return
        if _caller_module(frame.f_back) is None:
            return  # MLflow calling itself (log_artifacts through log_artifact)
        run_id = frame.f_locals.get("run_id")
        with self.lock:
            self.writes[str(run_id)] += 1


def _caller_module(frame: FrameType | None) -> str | None:
    """The module of the nearest frame in autotune/ or workers/ (None: none on the stack)."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if _ours(module):
            return module
        if module.startswith("mlflow."):
            return None
        frame = frame.f_back
    return None


@contextmanager
def profiled(recorder: Recorder) -> Iterator[None]:
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def on_path(edge: tuple[str, str]) -> bool:
    """Whether neither end is autotune.core: the contract, knobs and metrics every module
    speaks, not a station of the trial."""
    return not any(module.startswith(SHARED) for module in edge)


def back_and_forths(edges: Counter[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted({tuple(sorted(pair)) for pair in edges if (pair[1], pair[0]) in edges})  # type: ignore[misc]


def tune(trials: int, directory: Path) -> tuple[Recorder, dict[str, Any]]:
    """One profiled tuning of `trials` trials; the recorder and the tuned document."""
    from autotune.tuning import TuneOptions, run_tune

    request = digits_request(directory, budget={"trials": trials})
    path = directory / "request.yaml"
    path.write_text(yaml.safe_dump(request))
    options = TuneOptions(executor="inprocess", seed=0, out_dir=directory / "out")
    recorder = Recorder()
    with profiled(recorder):
        _, tuned_path = run_tune(path, options)
    return recorder, yaml.safe_load(tuned_path.read_text())


def run_writes(recorder: Recorder, tuned: dict[str, Any]) -> dict[str, float]:
    """MLflow writes made in this process to the study's run and, on average, to each
    trial's run (a trial's run is first written whole by the tracker's writer process)."""
    from mlflow.tracking import MlflowClient

    from autotune.tracking import PARENT_TAG, TRIAL_TAG

    uri, parent = tuned["mlflow"]["tracking_uri"], tuned["mlflow"]["run_id"]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tests")
    assert experiment is not None, "the tuning made its MLflow experiment"
    children = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'"
    )
    trial_runs = [r.info.run_id for r in children if TRIAL_TAG in r.data.tags]
    per_trial = [recorder.writes[run] for run in trial_runs]
    return {
        "MLflow writes here: study run": recorder.writes[parent],
        "MLflow writes here: a trial's run (mean)": sum(per_trial) / max(1, len(per_trial)),
        "MLflow writes here: all": sum(recorder.writes.values()),
    }


def figures(trials: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="trial-path-") as name:
        directory = Path(name)
        cwd = Path.cwd()
        os.chdir(directory)  # whatever a library writes beside it stays out of the repo
        try:
            recorder, tuned = tune(trials, directory)
        finally:
            os.chdir(cwd)
        path = Counter({edge: n for edge, n in recorder.edges.items() if on_path(edge)})
        counted: dict[str, float] = {
            "hops (distinct module edges)": len(recorder.edges),
            "hop calls": sum(recorder.edges.values()),
            "back-and-forths (module pairs)": len(back_and_forths(recorder.edges)),
            "path hops (outside autotune.core)": len(path),
            "path back-and-forths (outside autotune.core)": len(back_and_forths(path)),
        }
        counted.update({label: recorder.facts[label] for label, _, _ in FACTS})
        counted.update(run_writes(recorder, tuned))
    edges = {f"{a} -> {b}": n for (a, b), n in sorted(recorder.edges.items())}
    pairs = [f"{a} <-> {b}" for a, b in back_and_forths(recorder.edges)]
    callers = {f"{label} <- {caller}": n for (label, caller), n in recorder.fact_callers.items()}
    return {
        "trials": trials,
        "figures": counted,
        "edges": edges,
        "back_and_forths": pairs,
        "fact_callers": dict(sorted(callers.items())),
    }


def in_fresh_process(trials: int) -> dict[str, Any]:
    """`figures(trials)` in a new interpreter: nothing one tuning cached (the node's probe,
    a loaded workload) is there for the next."""
    command = [sys.executable, __file__, "--one", str(trials)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    model = next(
        (line.split(":", 1)[1].strip() for line in lscpu.splitlines() if "Model name" in line),
        platform.processor(),
    )
    return f"{model}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"


def per_trial(runs: list[dict[str, Any]], label: str) -> str:
    """The figure's growth per trial between the smallest and the largest budget."""
    low, high = runs[0], runs[-1]
    spread = high["trials"] - low["trials"]
    if spread == 0:
        return ""
    return f"{(high['figures'][label] - low['figures'][label]) / spread:g}"


def table(runs: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> str:
    heads = [f"{r['trials']} trials" for r in runs] + ["per trial"]
    if before is not None:
        heads = (
            [f"before, {h}" for h in heads[:-1]]
            + ["before, per trial"]
            + [f"after, {h}" for h in heads]
        )
    lines = ["| figure | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for label in runs[0]["figures"]:
        cells = [f"{r['figures'][label]:g}" for r in runs] + [per_trial(runs, label)]
        if before is not None:
            cells = (
                [f"{r['figures'][label]:g}" for r in before] + [per_trial(before, label)] + cells
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(runs: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> str:
    largest = runs[-1]
    edges = "\n".join(f"- {edge}: {n}" for edge, n in largest["edges"].items())
    pairs = "\n".join(f"- {pair}" for pair in largest["back_and_forths"]) or "- none"
    callers = "\n".join(f"- {fact}: {n}" for fact, n in largest["fact_callers"].items())
    return (
        "# A trial's path: hops between modules and facts computed\n\n"
        f"Machine: {machine()}. Made by `experiments/trial_path.py` (its docstring defines "
        "hop, back-and-forth and the facts): a digits tuning in process on the in-process "
        "executor, MLflow on SQLite, under a profiler.\n\n"
        f"{table(runs, before)}\n\n"
        f"## Back-and-forths now ({largest['trials']} trials)\n\n{pairs}\n\n"
        f"## Who computes each fact now ({largest['trials']} trials; calls)\n\n{callers}\n\n"
        f"## Module edges now ({largest['trials']} trials; calls)\n\n{edges}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--before", type=Path, help="figures to show beside these")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS}")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(figures(args.one)))
        return
    runs = [in_fresh_process(n) for n in sorted(args.trials)]
    before = json.loads(args.before.read_text()) if args.before else None
    text = report(runs, before)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    if args.write:
        RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
