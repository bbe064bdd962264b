"""A misspelt key in a submitted request is a 422 that names the key it was probably meant to
be, as `autotune tune` does."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.service_support import service_request


def test_a_misspelt_constraint_is_422_naming_the_key_meant(
    client: TestClient, alice: dict[str, str]
) -> None:
    request = service_request(constraints={"max_acuracy_drop": 0.01})
    response = client.post("/v1/jobs", json=request, headers=alice)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail["field"] == "constraints.max_acuracy_drop"
    assert "did you mean max_accuracy_drop?" in detail["rule"]
    assert detail["value"] == 0.01
