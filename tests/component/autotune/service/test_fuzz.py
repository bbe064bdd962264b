"""Schemathesis against the API's own OpenAPI document: valid and invalid inputs to every
operation, sent with a valid token; no answer may be a server error. Then what the document
cannot describe: ids of any text in every path that takes one, upload parts with any file
name, content type and bytes, any Content-Type. Bounded and derandomized: the same examples
every run. No job runner runs, so jobs stay queued."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from autotune.service import Database, ServiceSettings, create_app
from tests.service_support import service_request

EXAMPLES_PER_OPERATION = 30


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_operation_answers_with_a_server_error(
    settings: ServiceSettings, db: Database, alice: dict[str, str], mode: GenerationMode
) -> None:
    app = create_app(settings, db)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=alice)
    # The token is sent by the test: a generated Authorization header would only be a 401.
    schema.config.generation.update(with_security_parameters=False)
    results = list(schema.get_all_operations())
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) == 11
    seen: dict[str, set[int]] = {}
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not list(operation.body):
            continue  # any string is a valid path parameter: only bodies can be invalid
        _fuzz(operation, mode, alice, seen.setdefault(operation.label, set()))
    # Every operation was called, past the token check (else this fuzzed only the 401).
    assert seen and all(codes and 401 not in codes for codes in seen.values()), seen


def _fuzz(
    operation: APIOperation, mode: GenerationMode, headers: dict[str, str], seen: set[int]
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def no_server_error(case: Case) -> None:
        response = case.call_and_validate(headers=dict(headers), checks=[not_a_server_error])
        seen.add(response.status_code)

    no_server_error()


# -- what the OpenAPI document does not describe: path parameters of any text, upload parts
# with any header and any bytes ---------------------------------------------------------------

ID_ROUTES = [
    ("GET", "/v1/jobs/{}"),
    ("GET", "/v1/jobs/{}/result"),
    ("GET", "/v1/jobs/{}/pareto"),
    ("DELETE", "/v1/jobs/{}"),
    ("GET", "/v1/watches/{}"),
    ("DELETE", "/v1/watches/{}"),
]
FUZZ = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# Any text, NUL and other control characters, lone surrogates' neighbours, the separators of
# a path, very long ones, and well-formed ids of no job.
IDS = st.one_of(
    st.text(min_size=1, max_size=64),
    st.text(alphabet=st.sampled_from("\x00\x01\n\r\t /\\.%?#:;'\"<>é😀"), min_size=1),
    st.text(alphabet="0123456789abcdef", min_size=1, max_size=5000),
    st.from_regex(r"\A[0-9a-f]{32}\Z"),
)


@pytest.mark.parametrize(("method", "route"), ID_ROUTES, ids=lambda x: str(x))
def test_any_id_in_the_path_is_404_or_422(
    client: TestClient, alice: dict[str, str], method: str, route: str
) -> None:
    @FUZZ
    @given(job_id=IDS)
    def answer(job_id: str) -> None:
        path = route.format(quote(job_id, safe=""))
        response = client.request(method, path, headers=alice)
        found = (job_id, response.status_code, response.text)
        if "/" in job_id or job_id.strip(".") == "":
            # The path is decoded before routing: another route (or none) answers.
            assert response.status_code < 500, found
        else:
            assert response.status_code in (404, 422), found

    answer()


HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters='"\\'),
    max_size=300,
)
SAFETENSORS_HEADERS = st.one_of(
    st.binary(max_size=200),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=30,
    ).map(lambda value: json.dumps(value).encode()),
    # nested past any parser's depth
    st.integers(1, 200_000).map(lambda depth: b'{"a":' + b"[" * depth + b"]" * depth + b"}"),
)


@st.composite
def uploads(draw: st.DrawFn) -> bytes:
    """Bytes of any kind, or shaped like a safetensors file: a length, then a header."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=400))
    header = draw(SAFETENSORS_HEADERS)
    declared = draw(st.sampled_from([len(header), 0, 2**63, len(header) + 1]))
    return int(declared).to_bytes(8, "little") + header + draw(st.binary(max_size=64))


def test_any_upload_part_is_answered_without_a_server_error(
    client: TestClient, alice: dict[str, str]
) -> None:
    request = service_request()
    request["model"] = {"entry_point": "experiments.digits.model:build_model"}

    @FUZZ
    @given(
        filename=HEADER_TEXT,
        content_type=HEADER_TEXT,
        body=uploads(),
        weights=st.booleans(),
    )
    def answer(filename: str, content_type: str, body: bytes, weights: bool) -> None:
        document = request if weights else {k: v for k, v in request.items() if k != "model"}
        files = {
            "request": (None, json.dumps(document)),
            "model": (filename, body, content_type),
        }
        response = client.post("/v1/jobs", files=files, headers=alice)
        assert response.status_code in (202, 413, 422), (response.status_code, response.text)

    answer()


@FUZZ
@given(content_type=HEADER_TEXT)
def test_any_content_type_is_answered_without_a_server_error(
    client: TestClient, alice: dict[str, str], content_type: str
) -> None:
    headers = {**alice, "Content-Type": content_type.encode("latin-1")}
    response = client.post("/v1/jobs", content=b"name: x", headers=headers)
    assert response.status_code in (413, 415, 422), (response.status_code, response.text)
