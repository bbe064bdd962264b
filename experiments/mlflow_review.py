"""A study reviewed in the MLflow UI as a person sees it, in a real browser.

    .venv/bin/python experiments/mlflow_review.py [--trials 16] [--work DIR]
        [--out experiments/results/mlflow-review]

Tunes the digits example (in-process executor) into a fresh MLflow store, starts an MLflow
server on it, and saves headless-Chromium screenshots (Debian's `chromium`) of what a
reviewer opens without configuring anything: the experiment's runs table, the parent run's
overview with its description, and the Pareto report artifact. The screenshots and a
Markdown page that shows them go to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from autotune.tracking.review import view_link

REPO = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def tune(work: Path, trials: int) -> dict:
    request = yaml.safe_load((REPO / "experiments/digits/request.yaml").read_text())
    request["tracking"] = {"uri": f"sqlite:///{work / 'mlflow.db'}", "experiment": "digits"}
    request["storage"] = f"sqlite:///{work / 'study.db'}"
    path = work / "request.yaml"
    path.write_text(yaml.safe_dump(request, sort_keys=False))
    command = [str(REPO / ".venv/bin/autotune"), "tune", str(path), "--trials", str(trials),
               "--executor", "inprocess", "--seed", "0",
               "--out", str(work / "tuned.yaml")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(command, cwd=work, env=env, check=True)
    return yaml.safe_load((work / "tuned.yaml").read_text())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(work: Path, port: int) -> subprocess.Popen:
    command = [str(REPO / ".venv/bin/mlflow"), "server", "--host", "127.0.0.1", "--port",
               str(port), "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
               "--workers", "1"]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            time.sleep(1)
    server.kill()
    raise RuntimeError("the MLflow server did not answer within 90 s")


def screenshot(url: str, path: Path, size: str = "1600,1000", wait_ms: int = 15000) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium package (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                f"--virtual-time-budget={wait_ms}",
                f"--screenshot={path}",
                url,
            ],  # fmt: skip
            check=True,
            capture_output=True,
            timeout=180,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "experiments/results/mlflow-review")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="autotune-review-"))
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    tuned = tune(work, args.trials)
    experiment, run = tuned["mlflow"]["experiment_id"], tuned["mlflow"]["run_id"]
    port = free_port()
    server = serve(work, port)
    base = f"http://127.0.0.1:{port}"
    shots = {
        "runs-table.png": f"{base}/{view_link(experiment, tuned['study']['name'])}",
        "parent-run.png": f"{base}/#/experiments/{experiment}/runs/{run}",
        "pareto-report.png": (
            f"{base}/#/experiments/{experiment}/runs/{run}/artifacts/pareto/pareto_report.html"
        ),
    }
    try:
        for name, url in shots.items():
            print(f"screenshot {name}: {url}", flush=True)
            screenshot(url, args.out / name)
    finally:
        server.terminate()
        server.wait(timeout=30)
    page = [
        "# A study in the MLflow UI, as a reviewer sees it",
        "",
        f"Command: `.venv/bin/python experiments/mlflow_review.py --trials {args.trials}`: the "
        "digits example tuned into a fresh store, an MLflow server on it, headless Chromium "
        f"({chromium_version()}), MLflow {mlflow_version()}.",
        "",
        f"Headline of this run: {tuned['headline']['text']}",
        "",
    ]
    for name, url in shots.items():
        page += [f"## {name.removesuffix('.png')}", "", f"`{url.replace(base, '')}`", "",
                 f"![{name}]({name})", ""]  # fmt: skip
    (args.out / "README.md").write_text("\n".join(page))
    print(json.dumps({"out": str(args.out), "work": str(work)}))


def chromium_version() -> str:
    chromium = shutil.which("chromium") or "chromium"
    run = subprocess.run([chromium, "--version"], capture_output=True, text=True)
    return run.stdout.strip() or "version unknown"


def mlflow_version() -> str:
    from importlib.metadata import version

    return version("mlflow")


if __name__ == "__main__":
    sys.exit(main())
