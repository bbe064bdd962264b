"""Coordinator overhead per trial: ask + tell + storage + MLflow logging, the trial itself a
no-op, at growing trial counts on SQLite and PostgreSQL.

    .venv/bin/python experiments/coordinator_overhead.py [--counts 100 1000 5000]
        [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test] [--sampler random]

The no-op executor answers every trial at once with metrics computed from its
configuration, so what is timed is the coordinator alone. Writes
experiments/results/coordinator-overhead.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path

import sqlalchemy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.contract import (  # noqa: E402
    ArtifactInfo,
    ModelInfo,
    Provenance,
    TrialMetrics,
    TrialResult,
    TrialSpec,
    Workload,
    variant_key,
)
from autotune.coordinator import Coordinator, TuneSettings  # noqa: E402
from autotune.hardware import probe  # noqa: E402
from autotune.request import parse_request  # noqa: E402
from autotune.space import effective_space, load_space, resolve_space_path  # noqa: E402
from autotune.tracking import Tracker  # noqa: E402


class NoopExecutor:
    """Answers each trial at once; the figures are a pure function of the configuration."""

    slots = 1

    def __init__(self) -> None:
        self._done: deque[TrialResult] = deque()

    def inspect(self, workload: Workload) -> ModelInfo:
        return ModelInfo(
            kind="torch",
            sha256="0" * 64,
            n_samples=1,
            input_shape=[1],
            has_labels=True,
            parameter_bytes=0,
        )

    def submit(self, spec: TrialSpec) -> None:
        batch = int(spec.config.get("batch.size", 1))
        latency = 0.05 * batch**0.8
        metrics = TrialMetrics(
            accuracy=0.98 - 0.01 * float(spec.config.get("prune.ratio", 0.0)),
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
        provenance = Provenance(
            model_sha256="0" * 64, host="noop", software={}, measurement=spec.measurement
        )
        self._done.append(
            TrialResult(
                study=spec.study,
                trial_number=spec.trial_number,
                attempt=spec.attempt,
                status="ok",
                variant_key=variant_key(spec.config),
                metrics=metrics,
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
        raise NotImplementedError("the overhead benchmark stops before export")

    def close(self) -> None:
        pass


def run_once(storage: str, tracking: str, trials: int, sampler: str) -> list[float]:
    """Seconds between consecutive tells: the coordinator's cost per trial."""
    request = parse_request(
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
    profile = probe()
    space_path = resolve_space_path("cpu.yaml")
    executor = NoopExecutor()
    info = executor.inspect(request.workload(REPO))
    space = effective_space(load_space(space_path), profile, str(space_path), info)
    stamps: list[float] = []
    coordinator = Coordinator(
        request=request,
        workload=request.workload(REPO),
        model_info=info,
        space=space,
        profile=profile,
        executor=executor,
        settings=TuneSettings(
            study_name=f"overhead-{uuid.uuid4().hex[:6]}",
            storage=storage,
            artifact_dir=Path(tempfile.mkdtemp()),
            n_trials=trials,
            timeout_s=None,
            seed=0,
            sampler=sampler,
        ),
        tracking_uri=tracking,
        experiment="overhead",
        on_progress=lambda done, total, result: stamps.append(time.perf_counter()),
    )
    # The search loop alone (no re-validation or export: the trials measured nothing).
    study = coordinator._open_study(info)
    tracker = Tracker(tracking, "overhead", coordinator.settings.study_name)
    coordinator._search(study, tracker)
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def fresh_postgres(admin_url: str) -> tuple[str, str]:
    engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    names = [f"autotune_bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with engine.connect() as connection:
        for name in names:
            connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    base = admin_url.rsplit("/", 1)[0]
    return f"{base}/{names[0]}", f"{base}/{names[1]}"


def summary(gaps: list[float]) -> dict[str, float]:
    tenth = max(1, len(gaps) // 10)
    return {
        "median_ms": statistics.median(gaps) * 1e3,
        "first_10pct_ms": statistics.median(gaps[:tenth]) * 1e3,
        "last_10pct_ms": statistics.median(gaps[-tenth:]) * 1e3,
        "total_s": sum(gaps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sampler", default="random")
    parser.add_argument("--out", default=str(REPO / "experiments/results/coordinator-overhead.md"))
    args = parser.parse_args()
    rows = []
    for backend in ("sqlite", "postgresql"):
        for count in args.counts:
            with tempfile.TemporaryDirectory() as tmp:
                if backend == "sqlite":
                    storage = f"sqlite:///{tmp}/study.db"
                    tracking = f"sqlite:///{tmp}/mlflow.db"
                else:
                    storage, tracking = fresh_postgres(args.postgres)
                gaps = run_once(storage, tracking, count, args.sampler)
            row = {"backend": backend, "trials": count, **summary(gaps)}
            print(row, flush=True)
            rows.append(row)
    lines = [
        "# Coordinator overhead per trial",
        "",
        f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{probe().cpu_model}, {probe().cpu_cores} cores, {probe().memory_mb} MiB; "
        f"Python {platform.python_version()}.",
        "Command: `.venv/bin/python experiments/coordinator_overhead.py "
        f"--sampler {args.sampler}`.",
        "Each trial is a no-op answered at once; the time between consecutive tells is the "
        "coordinator's cost (ask, sampling, tell, storage writes and the MLflow child run). "
        "The study and MLflow use the same backend (SQLite files, or PostgreSQL on this machine).",
        "",
        "| backend | trials | median ms/trial | first 10% | last 10% | total s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['trials']} | {r['median_ms']:.1f} | {r['first_10pct_ms']:.1f} "
            f"| {r['last_10pct_ms']:.1f} | {r['total_s']:.0f} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
