"""Request documents are parsed in parser processes: each parse has a time limit, past which
its process is killed and replaced, and a full queue is told to retry."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from autotune.core.errors import RequestError, TooLarge
from autotune.service.documents import (
    MAX_YAML_BYTES,
    DocumentParser,
    ParserBusy,
    parse_document,
)


@pytest.fixture
def parser() -> Iterator[DocumentParser]:
    documents = DocumentParser(processes=1, limit_s=1.0, max_waiting=0)
    yield documents
    documents.close()


def parse(parser: DocumentParser, body: bytes, media: str = "application/yaml") -> object:
    return asyncio.run(parser.parse(body, media))


def test_a_document_is_parsed_in_another_process(parser: DocumentParser) -> None:
    assert parse(parser, b"name: x\nbudget: {trials: 3}") == {"name": "x", "budget": {"trials": 3}}
    assert parse(parser, b'{"name": "y"}', "application/json") == {"name": "y"}
    (pid,) = parser.pids()
    assert pid != os.getpid()


def test_the_parser_process_refuses_bad_documents_as_the_request_field(
    parser: DocumentParser,
) -> None:
    with pytest.raises(RequestError) as info:
        parse(parser, b"name: [unclosed")
    assert (info.value.field, "valid YAML" in info.value.rule) == ("request", True)
    with pytest.raises(RequestError, match="finite"):
        parse(parser, b'{"x": NaN}', "application/json")


def test_yaml_has_a_lower_cap_than_json_refused_before_any_parse(
    parser: DocumentParser,
) -> None:
    body = b"a: " + b"x" * MAX_YAML_BYTES
    with pytest.raises(TooLarge):
        parse(parser, body)
    assert parser.pids() == []  # no process was started for it
    assert parse(parser, b'{"a": "' + b"x" * MAX_YAML_BYTES + b'"}', "application/json")


def test_a_flat_yaml_list_at_the_cap_is_refused_by_its_count(parser: DocumentParser) -> None:
    body = b"a: [" + b"1," * (MAX_YAML_BYTES // 2 - 8) + b"1]"
    with pytest.raises(RequestError, match="at most 10000 values"):
        parse(parser, body)


def stop(pid: int) -> None:
    """The parse this process is about to be given takes forever."""
    os.kill(pid, signal.SIGSTOP)


def test_a_parse_past_its_limit_is_killed_and_its_process_replaced(
    parser: DocumentParser,
) -> None:
    parse(parser, b"a: 1")
    (frozen,) = parser.pids()
    stop(frozen)
    with pytest.raises(RequestError, match=r"must parse within 1 s") as info:
        parse(parser, b"name: x")
    assert info.value.field == "request"
    assert parser.killed == 1
    with pytest.raises(ProcessLookupError):
        os.kill(frozen, 0)  # killed and reaped
    assert parse(parser, b"name: again") == {"name": "again"}
    assert parser.pids() != [frozen]


def test_a_full_queue_is_told_to_retry(parser: DocumentParser) -> None:
    parse(parser, b"a: 1")
    (pid,) = parser.pids()
    stop(pid)
    waiting = threading.Thread(target=lambda: pytest.raises(RequestError, parse, parser, b"a: 2"))
    waiting.start()
    try:
        for _ in range(1000):  # until the first parse holds the only place
            if parser.in_flight == 1:
                break
            threading.Event().wait(0.005)
        with pytest.raises(ParserBusy):
            parse(parser, b"a: 3")
    finally:
        waiting.join()
    assert parse(parser, b"a: 4") == {"a": 4}


def test_parse_document_runs_the_same_checks_in_this_process() -> None:
    assert parse_document(b"a: [1, 2]", "application/yaml") == {"a": [1, 2]}
    with pytest.raises(RequestError, match="nest"):
        parse_document(b"[" * 40 + b"]" * 40, "application/json")
