"""Fixtures of the API tests: a service over SQLite files in a temporary directory, tokens
for two teams, and a local HTTP server that keeps what it is posted (a watch's notices)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from autotune.service import Database, ServiceSettings, create_app
from autotune.service.tokens import create_token
from tests.onnx_models import tiny_onnx
from tests.service_support import sqlite_settings


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tiny_onnx_bytes() -> bytes:
    return bytes(tiny_onnx().SerializeToString())


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Service tests run in their tmp_path: whatever a test, or a job runner in its process
    or spawned from it, writes into the working directory stays out of the clone."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    return sqlite_settings(tmp_path)


@pytest.fixture
def db(settings: ServiceSettings) -> Iterator[Database]:
    database = Database(settings.db)
    yield database
    database.close()


@pytest.fixture
def client(settings: ServiceSettings, db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, db)) as test_client:
        yield test_client


@pytest.fixture
def alice(db: Database) -> dict[str, str]:
    """Team a."""
    return bearer(create_token(db, "alice", team="a"))


@pytest.fixture
def bob(db: Database) -> dict[str, str]:
    """Also team a: sees alice's jobs."""
    return bearer(create_token(db, "bob", team="a"))


@pytest.fixture
def carol(db: Database) -> dict[str, str]:
    """Team b: sees none of team a's jobs."""
    return bearer(create_token(db, "carol", team="b"))


class Notices:
    """What a local HTTP server was posted."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []


@pytest.fixture
def notice_server() -> Iterator[tuple[str, Notices]]:
    notices = Notices()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            notices.received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/autotune", notices
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
