"""How long /healthz waits while hostile YAML submissions are parsed.

Starts `autotune serve` (API only, SQLite, from the checkout given) in a temporary
directory, sends `--hostile` concurrent YAML submissions of each shape below at once, and
polls /healthz every 50 ms from before they start until the last of them is answered. A
server that parses on the thread that answers every request stalls /healthz for as long as
the parses take; one that parses in parser processes does not.

    python experiments/service_stall.py [--checkout PATH] [--hostile 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
SHAPES = {
    # A flow list: PyYAML's costliest shape per byte that still parses.
    "flow list, 1 MiB": b"a: [" + b"1," * (MIB // 2 - 4) + b"1]",
    "flow list, 64 KiB": b"a: [" + b"1," * (32 * 1024 - 8) + b"1]",
    "block list, 1 MiB": b"a:\n" + b"- 1\n" * (MIB // 4 - 2),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--hostile", type=int, default=4)
    parser.add_argument("--port", type=int, default=8771)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [f"checkout {args.checkout} ({_commit(args.checkout)}), {_cpu()}", ""]
    lines += [
        "| shape | hostile answers (status: count) | slowest hostile answer, s |"
        " /healthz polls | /healthz median, ms | /healthz max, ms |",
        "|---|---|---|---|---|---|",
    ]
    with (
        tempfile.TemporaryDirectory() as tmp,
        _server(args.checkout, Path(tmp), args.port) as token,
    ):
        for shape, body in SHAPES.items():
            lines.append(_round(args.port, token, shape, body, args.hostile))
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


def _round(port: int, token: str, shape: str, body: bytes, hostile: int) -> str:
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    answers: list[tuple[int, float]] = []

    def submit() -> None:
        started = time.monotonic()
        response = httpx.post(f"{base}/v1/jobs", content=body, headers=headers, timeout=600)
        answers.append((response.status_code, time.monotonic() - started))

    threads = [threading.Thread(target=submit) for _ in range(hostile)]
    for thread in threads:
        thread.start()
    waits = []
    with httpx.Client(timeout=600) as client:
        while len(answers) < hostile:
            started = time.monotonic()
            client.get(f"{base}/healthz")
            waits.append(time.monotonic() - started)
            time.sleep(0.05)
    for thread in threads:
        thread.join()
    codes: dict[int, int] = {}
    for code, _ in answers:
        codes[code] = codes.get(code, 0) + 1
    slowest = max(seconds for _, seconds in answers)
    return (
        f"| {shape} | {', '.join(f'{c}: {n}' for c, n in sorted(codes.items()))} | {slowest:.2f} "
        f"| {len(waits)} | {statistics.median(waits) * 1000:.0f} | {max(waits) * 1000:.0f} |"
    )


class _server:
    def __init__(self, checkout: Path, tmp: Path, port: int) -> None:
        self.checkout, self.tmp, self.port = checkout, tmp, port

    def __enter__(self) -> str:
        env = {
            **os.environ,
            "PYTHONPATH": str(self.checkout),
            "AUTOTUNE_DB": f"sqlite:///{self.tmp}/svc.db",
        }
        token = subprocess.run(
            [sys.executable, "-m", "autotune", "token", "create", "bench", "--team", "t"],
            env=env,
            cwd=self.tmp,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        command = [
            sys.executable,
            "-m",
            "autotune",
            "serve",
            "--port",
            str(self.port),
            "--runners",
            "0",
            "--no-scheduler",
            "--storage",
            f"sqlite:///{self.tmp}/o.db",
            "--tracking-uri",
            f"sqlite:///{self.tmp}/m.db",
            "--data-dir",
            str(self.tmp / "data"),
        ]
        self.process = subprocess.Popen(command, env=env, cwd=self.tmp, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1)
                return token
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def __exit__(self, *exc: Any) -> None:
        self.process.terminate()
        self.process.wait(60)


def _commit(checkout: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"
    return platform.processor()


if __name__ == "__main__":
    main()
