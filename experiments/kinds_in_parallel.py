"""Two kinds of node tuned by one `autotune tune` on a local Ray cluster: the wall time, and
when each kind's study ran (from the study storage), for comparing revisions.

    .venv/bin/python experiments/kinds_in_parallel.py [--trials 6] [--json OUT.json]

The cluster is the tests' (`tests.ray_nodes`): a head that runs no trials and two worker
nodes pinned to one core each, one without OpenVINO, so of another kind. The request is the
digits example on the quick CPU space without its latency bound (both kinds can be tuned),
a fresh SQLite study and MLflow store in a temporary directory. Run it from the tree of the
revision to time (`git archive REV | tar -x -C DIR`, then DIR's script): the nodes and the
command import that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.ray_nodes import head_only  # noqa: E402


def request(tmp: Path, trials: int, **changes: Any) -> Path:
    """The digits example as these experiments run it (`changes` replace its sections)."""
    document = yaml.safe_load((REPO / "experiments/digits/request.yaml").read_text())
    document.update(
        model={"entry_point": "experiments.digits.model:build_model"},
        data={"entry_point": "experiments.digits.model:eval_data"},
        constraints={"max_accuracy_drop": 0.01},
        search_space="quick-cpu.yaml",
        budget={"trials": trials},
        validation={"rounds": 6, "round_seconds": 0.2},
        storage=f"sqlite:///{tmp}/study.db",
        tracking={"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "kinds"},
    )
    document.update(changes)
    path = tmp / "request.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def studies(storage: str) -> dict[str, dict[str, Any]]:
    """Each study's trials: how many ended, and when the first started and the last ended."""
    import optuna

    shown = {}
    for summary in optuna.get_all_study_summaries(storage):
        trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
        spans = [
            (t.datetime_start, t.datetime_complete)
            for t in trials
            if t.datetime_start is not None and t.datetime_complete is not None
        ]
        shown[summary.study_name] = {
            "trials": len(spans),
            "first_start": min(start for start, _ in spans).isoformat(),
            "last_end": max(end for _, end in spans).isoformat(),
        }
    return shown


def one_run(trials: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        with head_only(tmp / "nodes") as cluster:
            cluster.add_node("small", [1], {"kind": "small"}, hide=("openvino",))
            cluster.add_node("big", [0], {"kind": "big"})
            command = [sys.executable, "-m", "autotune", "tune", str(request(tmp, trials))]
            command += ["--ray-address", cluster.address, "--seed", "0"]
            started = time.perf_counter()
            done = subprocess.run(
                command, cwd=tmp, env=cluster.env, capture_output=True, text=True, check=False
            )
            seconds = time.perf_counter() - started
        return {
            "revision": REPO.name,
            "exit_code": done.returncode,
            "seconds": round(seconds, 1),
            "studies": studies(f"sqlite:///{tmp}/study.db"),
            "last_lines": done.stdout.strip().splitlines()[-3:],
            "load_average": os.getloadavg(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    figures = {"python": platform.python_version(), **one_run(args.trials)}
    shown = json.dumps(figures, indent=2)
    print(shown)
    if args.json is not None:
        args.json.write_text(shown)


if __name__ == "__main__":
    main()
