"""A client of the REST API: what `autotune submit`, `status` and `watch` call.

The server's answers come back as the errors the CLI knows: a 422 (or 413) is a
`RequestError` naming the field, the rule and the value; 401 `Unauthorized`; 404
`NotFound`; 409 `Conflict`; anything else, and a server that cannot be reached, an
`AutotuneError` that says what happened.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from autotune.core.errors import (
    AutotuneError,
    Conflict,
    NotFound,
    RequestError,
    TooLarge,
    Unauthorized,
)
from autotune.requests.request import read_request_file

FINAL_STATES = ("succeeded", "infeasible", "failed", "cancelled")


def token_file() -> Path:
    """Where a client looks for its token when none is given: $XDG_CONFIG_HOME/autotune/token
    (~/.config/autotune/token by default)."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "autotune" / "token"


def resolve_token(token: str | None) -> str:
    """The token given, else the one in the token file."""
    if token and token.strip():
        return token.strip()
    path = token_file()
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    rule = f"is required: pass --token, set AUTOTUNE_TOKEN, or write it to {path}"
    raise RequestError("token", rule, None)


class ServiceClient:
    def __init__(
        self,
        server: str,
        token: str,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.server = server.rstrip("/")
        self._http = httpx.Client(
            base_url=self.server,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def submit(
        self, request_file: Path, model_file: Path | None = None, trials: int | None = None
    ) -> dict[str, Any]:
        """Queue a job: {id, state, created}; created is False when an identical submission
        answered with its job. `trials` replaces the request's budget of trials."""
        document = yaml.safe_dump(request_with_trials(request_file, trials), sort_keys=False)
        if model_file is None:
            headers = {"Content-Type": "application/yaml"}
            return self._call("POST", "/v1/jobs", content=document, headers=headers)
        if not model_file.is_file():
            raise RequestError("model", "must be an existing file", str(model_file))
        with model_file.open("rb") as model:
            files = {"request": (None, document), "model": ("model", model)}
            return self._call("POST", "/v1/jobs", files=files)

    def status(self, job_id: str) -> dict[str, Any]:
        """The job's status; `job_id` may be a unique prefix of its id."""
        return self._call("GET", f"/v1/jobs/{job_id}")

    def result(self, job_id: str) -> dict[str, Any]:
        """The tuned configuration of a job that succeeded (Conflict otherwise)."""
        return self._call("GET", f"/v1/jobs/{job_id}/result")

    def pareto(self, job_id: str) -> list[dict[str, Any]]:
        trials: list[dict[str, Any]] = self._call("GET", f"/v1/jobs/{job_id}/pareto")["trials"]
        return trials

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/jobs/{job_id}")

    def wait(
        self,
        job_id: str,
        poll_s: float = 2.0,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the job's status until it ends; its final status."""
        while True:
            status = self.status(job_id)
            if on_status is not None:
                on_status(status)
            if status["state"] in FINAL_STATES:
                return status
            time.sleep(poll_s)

    def create_watch(
        self,
        request_file: Path,
        every: str | None = None,
        cron: str | None = None,
        retune_trials: int | None = None,
        notify: str | None = None,
        trials: int | None = None,
    ) -> dict[str, Any]:
        body = {
            "request": request_with_trials(request_file, trials),
            "every": every,
            "cron": cron,
            "retune_trials": retune_trials,
            "notify": notify,
        }
        try:
            content = json.dumps(body)
        except (TypeError, ValueError) as exc:
            raise RequestError("request", f"must hold only JSON values ({exc})", None) from None
        headers = {"Content-Type": "application/json"}
        return self._call("POST", "/v1/watches", content=content, headers=headers)

    def list_watches(self) -> list[dict[str, Any]]:
        watches: list[dict[str, Any]] = self._call("GET", "/v1/watches")["watches"]
        return watches

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise AutotuneError(f"cannot reach the server at {self.server}: {exc}") from None
        _raise_for(response)
        body: dict[str, Any] = response.json()
        return body


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    status = response.status_code
    if isinstance(detail, dict) and {"field", "rule", "value"} <= set(detail):
        kind = TooLarge if status == 413 else RequestError
        raise kind(str(detail["field"]), str(detail["rule"]), detail["value"])
    message = detail if isinstance(detail, str) else json.dumps(detail)
    if status == 401:
        raise Unauthorized(f"the server refused the token: {message}")
    if status == 404:
        raise NotFound(message)
    if status == 409:
        raise Conflict(message)
    raise AutotuneError(f"the server answered {status}: {message}")


def request_with_trials(request_file: Path, trials: int | None) -> dict[str, Any]:
    """The request file's document, its budget of trials replaced where `trials` is given."""
    request = read_request_file(request_file)
    budget = request.get("budget", {})
    # A malformed budget is left to the server to refuse.
    if trials is not None and isinstance(budget, dict):
        request["budget"] = {**budget, "trials": trials}
    return request
