"""A private, throw-away PostgreSQL cluster for tests that must stop or restart the server.

The machine's shared PostgreSQL (ADMIN_URL in tests/conftest.py) is never stopped,
restarted or reconfigured by a test: others are connected to it. A test that needs a
database restart gets its own cluster instead: `initdb` into a temporary directory, a free
port on 127.0.0.1, started and stopped with `pg_ctl`, removed at the end. As root, initdb
and postgres refuse to run, so there they run as the `postgres` OS user, which owns the
directory.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.ports import free_port

# Where Debian/Ubuntu install the server binaries, one directory per major version.
BIN_GLOB = "/usr/lib/postgresql/*/bin"
OS_USER = "postgres"
TIMEOUT_S = 120


class Unavailable(Exception):
    """Why a private cluster cannot be made on this machine (the test skips with this)."""


def server_bin_dir() -> Path:
    """The directory holding initdb, pg_ctl and postgres: the newest version installed
    under /usr/lib/postgresql, else wherever PATH has them."""
    candidates = [Path(p) for p in _glob_versions()]
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates.append(Path(on_path).parent)
    for directory in candidates:
        if all((directory / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return directory
    raise Unavailable(
        f"PostgreSQL's server binaries (initdb, pg_ctl, postgres) are not installed "
        f"(looked in {BIN_GLOB} and PATH)"
    )


def _glob_versions() -> list[str]:
    import glob

    def version(path: str) -> tuple[int, ...]:
        found = re.search(r"/postgresql/([\d.]+)/bin$", path)
        return tuple(int(x) for x in found.group(1).split(".")) if found else ()

    return sorted(glob.glob(BIN_GLOB), key=version, reverse=True)


class PrivateCluster:
    """One PostgreSQL server of the test's own; `url(database)` for SQLAlchemy."""

    def __init__(self, root: Path, bin_dir: Path, as_user: str | None) -> None:
        self.root = root
        self.bin_dir = bin_dir
        self.as_user = as_user  # None: run as this process's user
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _command(self, *args: str) -> list[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_user is not None:
            command = ["runuser", "-u", self.as_user, "--", *command]
        return command

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = self._command(*args)
        done = subprocess.run(
            command,
            cwd=self.root,  # the postgres user may not be able to enter the caller's cwd
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
                f"\n----- server log -----\n{self.server_log()}"
            )
        return done

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def init(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )

    def start(self) -> None:
        # Only TCP on 127.0.0.1 and a socket directory of its own: nothing is shared with
        # the machine's server (its port, /var/run/postgresql) but the binaries.
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            " -c fsync=off -c full_page_writes=off -c max_connections=100"
        )
        wait = ("-w", "-t", str(TIMEOUT_S))
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, *wait, "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(TIMEOUT_S), "stop")

    def restart(self) -> None:
        """Stop (every connection is cut) and start again on the same port."""
        self.stop()
        self.start()

    def is_running(self) -> bool:
        command = self._command("pg_ctl", "-D", str(self.data), "status")
        done = subprocess.run(command, cwd=self.root, capture_output=True, timeout=TIMEOUT_S)
        return done.returncode == 0


def _os_user() -> str | None:
    """The user the server runs as: this process's own, or `postgres` when this is root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        raise Unavailable(
            f"running as root, and there is no {OS_USER!r} OS user to run initdb/postgres as"
        ) from None
    if shutil.which("runuser") is None:
        raise Unavailable("running as root, and `runuser` is not installed")
    return OS_USER


@contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """A started private cluster, stopped and deleted afterwards. Raises Unavailable when
    this machine cannot run one."""
    bin_dir = server_bin_dir()
    user = _os_user()
    # Under /tmp itself, not pytest's tmp_path: the postgres user must be able to reach it.
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-", dir="/tmp"))
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        root.chmod(0o700)
        cluster = PrivateCluster(root, bin_dir, user)
        cluster.init()
        for attempt in range(3):
            try:
                cluster.start()
                break
            except RuntimeError:
                if attempt == 2:  # the port may have been taken between choosing and binding
                    raise
                cluster.port = free_port()
        try:
            yield cluster
        finally:
            if cluster.is_running():
                cluster.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
