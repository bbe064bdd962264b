"""Schemathesis against the API's own OpenAPI document: valid and invalid inputs to every
operation, sent with a valid token; no answer may be a server error. Bounded and
derandomized: the same examples every run. No job runner runs, so jobs stay queued."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from autotune.service import Database, ServiceSettings, create_app

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
