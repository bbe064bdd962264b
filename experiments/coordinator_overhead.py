"""Coordinator cost per trial, side by side with the obvious hand-written loop.

    .venv/bin/python experiments/coordinator_overhead.py [--counts 1000 5000]
        [--backends sqlite postgresql] [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test]

Both sides run the same trials, answered at once from a table (a pure function of the
configuration), so what costs time is the loop alone:
- plain: Optuna ask, the space sampled through the trial, tell, and one MLflow child run per
  trial (create_run, log_batch, set_terminated), in the order a person would write it;
- autotune: the coordinator's search with the random strategy (the sampler both sides share),
  its result store and its MLflow tracker, which writes child runs in the background; the
  time includes waiting for every child run to be written.
Each side gets fresh databases of the same backend for the study and for MLflow. Sides
alternate (plain, autotune, plain, ...) for `--repeats` pairs per count, and the ratio is
taken per pair. Writes experiments/results/coordinator-overhead.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import sqlalchemy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.core.contract import (  # noqa: E402
    ArtifactInfo,
    ModelInfo,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    Workload,
)
from autotune.core.knobs import variant_key  # noqa: E402
from autotune.core.metrics import OBJECTIVES  # noqa: E402
from autotune.execution.base import FixedSlots  # noqa: E402
from autotune.requests.request import TuningRequest, parse_request  # noqa: E402
from autotune.results import OptunaStore, StudyIdentity  # noqa: E402
from autotune.search.budget import SearchBudget  # noqa: E402
from autotune.search.coordinator import Coordinator, Tuning  # noqa: E402
from autotune.space.search_space import (  # noqa: E402
    EffectiveSpace,
    effective_space,
    load_space,
    resolve_space_path,  # noqa: E402
)
from autotune.strategies import make_strategy  # noqa: E402
from autotune.tracking import MlflowTracker  # noqa: E402
from workers.building.probe import probe  # noqa: E402

INFO = ModelInfo(
    kind="torch", sha256="0" * 64, n_samples=1, input_shape=[1], has_labels=True,
    parameter_bytes=0,
)  # fmt: skip


def answer(config: dict[str, Any]) -> TrialMetrics:
    """The table both sides read: figures that depend only on the configuration."""
    batch = int(config.get("batch.size", 1))
    latency = 0.05 * batch**0.8
    return TrialMetrics(
        accuracy=0.98 - 0.01 * float(config.get("prune.ratio", 0.0)),
        latency_p50_ms=latency,
        latency_p90_ms=latency,
        latency_p95_ms=latency,
        latency_p99_ms=latency,
        latency_mean_ms=latency,
        latency_cv=0.0,
        throughput_per_s=1000 * batch / latency,
        energy_per_sample_j=1e-4 / batch,
        energy_source="estimate",
        peak_memory_mb=100.0,
        iterations=1,
        measure_seconds=0.0,
    )


class TableExecutor(FixedSlots):
    """Answers each trial at once from `answer`."""

    slots = 1
    runs_in_process = False
    trial_memory_mb: int | None = None

    def __init__(self) -> None:
        self._done: deque[TrialResult] = deque()

    def inspect(self, workload: Workload) -> ModelInfo:
        return INFO

    def submit(self, spec: TrialSpec) -> None:
        provenance = Provenance(
            model_sha256=INFO.sha256, host="table", software={}, measurement=spec.measurement
        )
        self._done.append(
            TrialResult(
                study=spec.study,
                trial_number=spec.trial_number,
                attempt=spec.attempt,
                status="ok",
                variant_key=variant_key(spec.config),
                metrics=answer(spec.config),
                provenance=provenance,
                duration_s=0.0,
            )
        )

    def pending(self) -> int:
        return len(self._done)

    def wait(self) -> list[TrialResult]:
        done = list(self._done)
        self._done.clear()
        return done

    def export(self, spec: TrialSpec, out_dir: str) -> ArtifactInfo:
        raise NotImplementedError("the benchmark stops after the search")

    def compare(self, spec: Any) -> Any:
        raise NotImplementedError("the benchmark stops after the search")

    def close(self) -> None:
        pass


def make_request(trials: int, storage: str, tracking: str) -> TuningRequest:
    return parse_request(
        {
            "name": "overhead",
            "model": {"entry_point": "noop.model:build"},
            "data": {"entry_point": "noop.model:data"},
            "constraints": {"max_accuracy_drop": 0.01},
            "search_space": "cpu.yaml",
            "budget": {"trials": trials},
            "tracking": {"uri": tracking, "experiment": "overhead"},
            "storage": storage,
        }
    )


def make_space() -> EffectiveSpace:
    path = resolve_space_path("cpu.yaml")
    return effective_space(load_space(path), probe(), str(path), INFO)


def run_autotune(trials: int, storage: str, tracking: str, space: EffectiveSpace) -> float:
    """Seconds for `trials` trials through the coordinator's search, every child run written."""
    request = make_request(trials, storage, tracking)
    study = f"overhead-{uuid.uuid4().hex[:6]}"
    strategy = make_strategy("random", space, request, seed=0)
    started = time.perf_counter()
    identity = StudyIdentity(
        model_sha256=INFO.sha256, objectives=list(request.objectives), space=space.name,
        hardware_fingerprint=probe().fingerprint,
    )  # fmt: skip
    directions = [OBJECTIVES[o].direction.value for o in request.objectives]
    store = OptunaStore.open(study, storage, directions, strategy.sampler(), identity)
    tracker = MlflowTracker(tracking, "overhead", study)
    tuning = Tuning(request, request.workload(REPO), INFO, space, probe(), Path(tempfile.mkdtemp()))
    coordinator = Coordinator(
        tuning, store, strategy, TableExecutor(), tracker, SearchBudget(trials, None),
        stop=threading.Event(),
    )  # fmt: skip
    coordinator.search()
    tracker.finish("FINISHED")
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def run_plain(trials: int, storage: str, tracking: str, space: EffectiveSpace) -> float:
    """Seconds for `trials` trials through plain Optuna ask/tell, one MLflow child run each."""
    import optuna
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    request = make_request(trials, storage, tracking)
    objectives = [OBJECTIVES[o] for o in request.objectives]
    started = time.perf_counter()
    rdb = optuna.storages.RDBStorage(storage)
    study = optuna.create_study(
        storage=rdb,
        directions=[m.direction.value for m in objectives],
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    client = MlflowClient(tracking)
    experiment = client.create_experiment(f"plain-{uuid.uuid4().hex[:6]}")
    parent = client.create_run(experiment).info.run_id
    for _ in range(trials):
        trial = study.ask()
        config = space.sample(trial)
        metrics = answer(config).model_dump()
        metrics["accuracy_drop"] = 0.98 - metrics["accuracy"]
        study.tell(trial, [float(metrics[m.name]) for m in objectives])
        run = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
        now = int(time.time() * 1000)
        numbers = {k: v for k, v in metrics.items() if isinstance(v, float | int)}
        client.log_batch(
            run,
            metrics=[Metric(k, float(v), now, 0) for k, v in numbers.items()],
            params=[Param(k, str(v)) for k, v in config.items()],
        )
        client.set_terminated(run)
    client.set_terminated(parent)
    elapsed = time.perf_counter() - started
    rdb.engine.dispose()
    return elapsed


def fresh_databases(backend: str, admin_url: str, tmp: Path) -> tuple[str, str]:
    if backend == "sqlite":
        return f"sqlite:///{tmp}/study.db", f"sqlite:///{tmp}/mlflow.db"
    engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    names = [f"autotune_bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with engine.connect() as connection:
        for name in names:
            connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    base = admin_url.rsplit("/", 1)[0]
    return f"{base}/{names[0]}", f"{base}/{names[1]}"


def measure(backend: str, count: int, repeats: int, admin_url: str) -> dict[str, Any]:
    space = make_space()
    plain: list[float] = []
    ours: list[float] = []
    for _ in range(repeats):
        for side, times, run in (("plain", plain, run_plain), ("autotune", ours, run_autotune)):
            with tempfile.TemporaryDirectory() as tmp:
                storage, tracking = fresh_databases(backend, admin_url, Path(tmp))
                seconds = run(count, storage, tracking, space)
            times.append(seconds)
            print(f"{backend} {count} {side}: {1000 * seconds / count:.1f} ms/trial", flush=True)
    ratios = [a / p for a, p in zip(ours, plain, strict=True)]
    return {
        "backend": backend,
        "trials": count,
        "plain_ms": 1000 * statistics.median(plain) / count,
        "autotune_ms": 1000 * statistics.median(ours) / count,
        "ratio": statistics.median(ratios),
        "ratios": ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--out", default=str(REPO / "experiments/results/coordinator-overhead.md"))
    args = parser.parse_args()
    rows = [
        measure(backend, count, args.repeats, args.postgres)
        for backend in args.backends
        for count in args.counts
    ]
    profile = probe()
    lines = [
        "# Coordinator cost per trial, beside plain Optuna + MLflow",
        "",
        f"Machine: {profile.cpu_model}, {profile.cpu_cores} cores, {profile.memory_mb} MiB; "
        f"Python {platform.python_version()}; host {platform.node()}.",
        "Command: `.venv/bin/python experiments/coordinator_overhead.py "
        + " ".join(
            f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in (
                ("counts", args.counts),
                ("backends", args.backends),
                ("repeats", args.repeats),
            )
        )  # fmt: skip
        + "`.",
        "",
        "Each trial is answered at once from a table; what is timed is the loop: for plain, "
        "Optuna ask, sampling the space through the trial, tell and one MLflow child run "
        "(create, log_batch, terminate); for autotune, the coordinator's search (random "
        "strategy, its result store, its MLflow tracker) until every child run is written. "
        "Study and MLflow share one backend, fresh databases per run; the two sides "
        "alternate and the ratio is taken per pair.",
        "",
        "| backend | trials | plain ms/trial | autotune ms/trial | autotune / plain (per pair) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        pairs = ", ".join(f"{x:.2f}" for x in r["ratios"])
        lines.append(
            f"| {r['backend']} | {r['trials']} | {r['plain_ms']:.1f} | {r['autotune_ms']:.1f} "
            f"| {r['ratio']:.2f} ({pairs}) |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
