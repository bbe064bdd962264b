"""A node of the study's kind killed mid-trial: what the study does next, for comparing
revisions.

    .venv/bin/python experiments/node_loss.py [--trials 8] [--give-up-s 150] [--json OUT.json]

The cluster is the tests' (`tests.ray_nodes`): a head that runs no trials and two worker
nodes of one kind, pinned to one core each. `autotune tune --workers 2` runs the digits
example on the quick CPU space (trials of 1.5 s of timing at least) with a fresh SQLite
study; once two trials count and one runs, node `b` is killed as a preempted machine is
(SIGKILL to its process group). Recorded: the exit code (or that the command was still
running `--give-up-s` after the kill, when it is stopped), the wall time, the study's trial
states, its lost and interrupted records, and which node measured what. Run it from the tree
of the revision to measure (`git archive REV | tar -x -C DIR`, then DIR's script).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.results.leases import schema_lock  # noqa: E402
from experiments.kinds_in_parallel import request  # noqa: E402
from tests.ray_nodes import head_only  # noqa: E402

SLOW = {"warmup_iters": 2, "min_iters": 10, "min_seconds": 1.5, "max_seconds": 2.0}


def trials(storage: str) -> list[Any]:
    """The study's trials, read with Optuna (any revision's storage), [] before it exists."""
    import optuna

    try:
        with schema_lock(storage):  # the coordinator may be creating Optuna's tables
            study = optuna.load_study(study_name="digits-cnn", storage=storage)
        return study.get_trials(deepcopy=False)
    except KeyError:
        return []


def summary(storage: str) -> dict[str, Any]:
    states: Counter[str] = Counter()
    interrupted = lost = 0
    nodes: Counter[str] = Counter()
    for trial in trials(storage):
        states[trial.state.name.lower()] += 1
        record = trial.user_attrs.get("record") or {}
        interrupted += bool(record.get("interrupted"))
        lost += record.get("status") == "lost"
        node = (record.get("provenance") or {}).get("node_id")
        if node:
            nodes[node[:8]] += 1
    return {
        "states": dict(states),
        "lost_records": lost,
        "interrupted_records": interrupted,
        "measured_on": dict(nodes),
    }


def one_run(trials_wanted: int, give_up_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        with head_only(tmp / "nodes") as cluster:
            cluster.add_node("a", [0])
            cluster.add_node("b", [1])
            path = request(tmp, trials_wanted, measurement=SLOW)
            storage = f"sqlite:///{tmp}/study.db"
            command = [sys.executable, "-m", "autotune", "tune", str(path), "--seed", "0"]
            command += ["--workers", "2", "--ray-address", cluster.address]
            started = time.monotonic()
            with (tmp / "tune.log").open("w") as log:
                process = subprocess.Popen(
                    command,
                    cwd=tmp,
                    env={**cluster.env, "PYTHONPATH": str(REPO)},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                killed_at = wait_inside_a_trial(storage, process)
                cluster.kill_node("b")
                try:
                    code: int | str = process.wait(timeout=give_up_s)
                except subprocess.TimeoutExpired:
                    code = f"still running {give_up_s:g} s after the kill"
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
            wall_s = time.monotonic() - started
            output = (tmp / "tune.log").read_text()
            return {
                "exit": code,
                "wall_s": round(wall_s, 1),
                "killed_after_s": round(killed_at - started, 1),
                **summary(storage),
                "said": [line for line in output.splitlines() if "left" in line][:3],
            }


def wait_inside_a_trial(storage: str, process: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        states = [t.state.name for t in trials(storage)]
        if states.count("COMPLETE") + states.count("PRUNED") >= 2 and "RUNNING" in states:
            return time.monotonic()
        time.sleep(0.2)
    raise SystemExit("the study never had two trials counted and one running")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--give-up-s", type=float, default=150.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "run": one_run(args.trials, args.give_up_s),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
