"""How the API reads a request body, over a real HTTP server and a raw socket: a body that
arrives too slowly is refused (408) while the server answers others, and a body without a
valid token is refused before any of it is read."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from autotune.service import Database, ServiceSettings, create_app
from autotune.service.tokens import create_token
from tests.service_support import sqlite_settings, wait_for

BODY = json.dumps({"every": "1h", "request": {"name": "slow"}}).encode()


@contextmanager
def served(settings: ServiceSettings, db: Database) -> Iterator[int]:
    """The API on a free port, served by uvicorn in a thread of this process."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(settings, db), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "the API server to start")
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@dataclass
class SlowBody:
    """A POST whose headers go at once and whose body goes one byte a second, until the
    server answers; `sent` counts the body's bytes sent before the answer came."""

    port: int
    path: str
    headers: dict[str, str]
    body: bytes = BODY
    sent: int = 0
    answer: bytes | None = None
    _thread: threading.Thread = field(init=False)

    def start(self) -> SlowBody:
        self._thread = threading.Thread(target=self._send, daemon=True)
        self._thread.start()
        return self

    def _send(self) -> None:
        headers = {
            "Host": "127.0.0.1",
            "Content-Type": "application/json",
            "Content-Length": str(len(self.body)),
            **self.headers,
        }
        head = f"POST {self.path} HTTP/1.1\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            sock.sendall(head.encode())
            for byte in self.body:
                if select.select([sock], [], [], 1.0)[0]:
                    break  # answered before the body was all sent
                try:
                    sock.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    break  # answered and closed between the look and the byte
                self.sent += 1
            self.answer = _read_answer(sock)

    def result(self) -> tuple[int, dict[str, str], Any]:
        self._thread.join(120)
        assert self.answer is not None, "no answer"
        head, _, body = self.answer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        return int(status_line.split()[1]), headers, json.loads(body)


def _read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset after it
    answered, for a byte that arrived after it closed, ends it too)."""
    sock.settimeout(60)
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(sqlite_settings(tmp_path).db)
    yield database
    database.close()


@pytest.mark.parametrize("path", ["/v1/watches", "/v1/jobs"])
def test_a_body_that_arrives_too_slowly_is_408_while_the_server_answers_others(
    tmp_path: Path, db: Database, path: str
) -> None:
    settings = sqlite_settings(tmp_path, body_timeout_s=3.0)
    token = create_token(db, "alice", team="a")
    with served(settings, db) as port:
        slow = SlowBody(port, path, {"Authorization": f"Bearer {token}"}).start()
        wait_for(lambda: slow.sent >= 1, 30, "the first byte of the body to be sent")
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)
        assert health.status_code == 200
        assert slow.answer is None, "the slow body was answered before /healthz"
        status, headers, body = slow.result()
    assert slow.sent < len(slow.body), "the server waited for the whole body"
    assert (status, headers["connection"]) == (408, "close")
    assert body["detail"]["field"] == "body"
    assert body["detail"]["rule"].startswith("must arrive within 3 s")


@pytest.mark.parametrize("path", ["/v1/watches", "/v1/jobs"])
@pytest.mark.parametrize("authorization", [None, "Bearer nope"])
def test_a_body_without_a_valid_token_is_refused_before_it_is_read(
    tmp_path: Path, db: Database, path: str, authorization: str | None
) -> None:
    """With a timeout far longer than the body takes, the 401 comes before the body is all
    sent: it was not waited for."""
    settings = sqlite_settings(tmp_path, body_timeout_s=600.0)
    headers = {} if authorization is None else {"Authorization": authorization}
    with served(settings, db) as port:
        slow = SlowBody(port, path, headers).start()
        status, answered, body = slow.result()
    assert slow.sent < len(slow.body), "the server waited for the whole body"
    assert (status, answered["www-authenticate"], answered["connection"]) == (
        401,
        "Bearer",
        "close",
    )
    assert "token" in body["detail"]
