"""Health checks of the compose services (exit 0 when healthy).

    python docker/healthcheck.py http URL         # URL answers 2xx (the API, MLflow)
    python docker/healthcheck.py ray-node ADDRESS # this container's raylet is alive and the
                                                  # cluster's GCS at ADDRESS lets it in

Only the standard library and psutil (a dependency of the project) are used, so the check
runs in the slim images, which have no curl.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request


def http(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return 0 if 200 <= response.status < 300 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1


def ray_node(address: str) -> int:
    import psutil

    raylets = [
        p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("raylet")
    ]
    if not raylets:
        print("no raylet runs in this container", file=sys.stderr)
        return 1
    # Authenticates with RAY_AUTH_TOKEN like every client of the cluster.
    check = subprocess.run(["ray", "health-check", "--address", address], timeout=30)
    return check.returncode


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "http":
        return http(argv[1])
    if len(argv) == 2 and argv[0] == "ray-node":
        return ray_node(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
