"""Request documents as clients send them: their caps, their parsing, and the processes
that parse them.

A document is parsed in a parser process, never on the thread that answers every request:
YAML costs far more CPU per byte than JSON (a megabyte of it, seconds), so one tenant's
document must not stall another's `/healthz` or status call. A parse gets `limit_s`; one
that runs longer is killed with its process, which is replaced. At most `processes` parse
at once and `max_waiting` more may wait for them; a submission beyond that is told to retry
(503).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import yaml

from autotune.core.errors import AutotuneError, RequestError, TooLarge

# The request document itself (not a model upload) is small; anything bigger is refused.
# YAML is far costlier to parse than JSON, and gets a lower cap.
MAX_DOCUMENT_BYTES = 1 << 20
MAX_YAML_BYTES = 64 << 10
MAX_DOCUMENT_VALUES = 10_000
MAX_DOCUMENT_DEPTH = 32
JSON_TYPE = "application/json"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
PARSE_LIMIT_S = 2.0
PARSER_PROCESSES = 2
MAX_WAITING_PARSES = 8
# How long a new parser process may take to start (import yaml) before it counts as broken.
START_LIMIT_S = 60.0
# libyaml's parser where PyYAML was built with it (its wheels are): several times faster.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

log = logging.getLogger("autotune.api")


class ParserBusy(AutotuneError):
    """Every parser process is taken and the queue for them is full: retry later."""


def too_large(limit: int) -> TooLarge:
    return TooLarge("body", f"must be at most {limit} bytes", f"more than {limit} bytes")


def document_cap(media: str) -> int:
    return MAX_DOCUMENT_BYTES if media == JSON_TYPE else MAX_YAML_BYTES


def parse_document(body: bytes, media: str) -> Any:
    """The document in `body` (JSON, else YAML), checked by `check_document`; here, on the
    calling thread: the service calls it through a `DocumentParser`."""
    if len(body) > document_cap(media):
        raise too_large(document_cap(media))
    kind = "JSON" if media == JSON_TYPE else "YAML"
    try:
        text = body.decode("utf-8")
        raw = json.loads(text) if media == JSON_TYPE else yaml.load(text, Loader=YAML_LOADER)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RequestError("request", f"must be valid {kind} ({reason})", None) from None
    check_document(raw)
    return raw


def check_document(raw: Any) -> None:
    """A request document is small and plain: bounded size and depth (YAML aliases count
    each time they are used), finite numbers."""
    pending: list[tuple[Any, int]] = [(raw, 1)]
    seen = 0
    while pending:
        item, depth = pending.pop()
        seen += 1
        if seen > MAX_DOCUMENT_VALUES:
            raise RequestError("request", f"must hold at most {MAX_DOCUMENT_VALUES} values", None)
        if depth > MAX_DOCUMENT_DEPTH:
            raise RequestError("request", f"must nest at most {MAX_DOCUMENT_DEPTH} levels", None)
        if isinstance(item, float) and not math.isfinite(item):
            raise RequestError("request", "numbers must be finite", repr(item))
        if isinstance(item, dict):
            pending.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple | set):
            pending.extend((v, depth + 1) for v in item)


class DocumentParser:
    """Parses documents in `processes` parser processes, each owned by one thread of a pool
    of that size (a thread waits on its process without holding the interpreter)."""

    def __init__(
        self,
        processes: int = PARSER_PROCESSES,
        limit_s: float = PARSE_LIMIT_S,
        max_waiting: int = MAX_WAITING_PARSES,
    ) -> None:
        self.limit_s = limit_s
        self._capacity = processes + max_waiting
        self.in_flight = 0  # parses running or waiting for a process
        self._threads = ThreadPoolExecutor(processes, thread_name_prefix="document-parser")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._processes: set[_ParserProcess] = set()
        self.killed = 0  # parser processes killed at their limit, over this parser's life

    async def parse(self, body: bytes, media: str) -> Any:
        import asyncio

        if len(body) > document_cap(media):  # refused before it costs a process anything
            raise too_large(document_cap(media))
        with self._lock:
            if self.in_flight >= self._capacity:
                raise ParserBusy("every request parser is busy; retry in a few seconds")
            self.in_flight += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._threads, self._parse, body, media)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _parse(self, body: bytes, media: str) -> Any:
        process = getattr(self._local, "process", None)
        if process is None or not process.alive():
            process = self._local.process = self._start()
        try:
            return process.parse(body, media, self.limit_s)
        except _ParseOverrun:
            self._retire(process)
            self._local.process = None
            self.killed += 1
            log.warning(
                "a request document took over %s s to parse; its parser was killed", self.limit_s
            )
            rule = f"must parse within {self.limit_s:g} s (a request is a small document)"
            raise RequestError("request", rule, f"{len(body)} bytes of {media}") from None

    def _start(self) -> _ParserProcess:
        process = _ParserProcess()
        with self._lock:
            self._processes.add(process)
        return process

    def _retire(self, process: _ParserProcess) -> None:
        process.kill()
        with self._lock:
            self._processes.discard(process)

    def pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._processes]

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            processes, self._processes = self._processes, set()
        for process in processes:
            process.kill()


class _ParseOverrun(Exception):
    pass


class _ParserProcess:
    """`python -m autotune.service.documents`, talking over two pipes: a (body, media) in,
    ("ok", document) or ("error", field, rule, value) out. It imports only this module's
    own imports, and ends when its input pipe closes (its server is gone)."""

    def __init__(self) -> None:
        to_child, self._in = os.pipe()
        self._out, from_child = os.pipe()
        command = [sys.executable, "-m", __name__, str(to_child), str(from_child)]
        self._process = subprocess.Popen(
            command, pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL
        )
        os.close(to_child)
        os.close(from_child)
        self._send = Connection(self._in, readable=False)
        self._receive = Connection(self._out, writable=False)
        self.pid = self._process.pid
        self._ready = False

    def alive(self) -> bool:
        return self._process.poll() is None

    def parse(self, body: bytes, media: str, limit_s: float) -> Any:
        if not self._ready:  # its start is not the document's time
            self._await(START_LIMIT_S)
            self._ready = True
        self._send.send((body, media))
        reply = self._await(limit_s)
        if reply[0] == "error":
            raise RequestError(*reply[1:])
        return reply[1]

    def _await(self, limit_s: float) -> Any:
        try:
            if self._receive.poll(limit_s):
                return self._receive.recv()
        except (EOFError, OSError):
            log.warning("a request parser process ended (exit %s)", self._process.poll())
        raise _ParseOverrun

    def kill(self) -> None:
        self._process.kill()
        self._process.wait()
        self._send.close()
        self._receive.close()


def _serve(read_fd: int, write_fd: int) -> None:
    requests = Connection(read_fd, writable=False)
    replies = Connection(write_fd, readable=False)
    replies.send(("ready",))
    while True:
        try:
            body, media = requests.recv()
        except EOFError:
            return
        try:
            replies.send(("ok", parse_document(body, media)))
        except RequestError as error:
            replies.send(("error", error.field, error.rule, error.value))
        except Exception as error:  # noqa: BLE001 - whatever the parser raised, it is bad input
            rule = f"must be a valid request document ({type(error).__name__})"
            replies.send(("error", "request", rule, None))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
