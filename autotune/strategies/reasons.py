"""What a failed trial's reason says, and how it is shown.

A worker's error reason is `Type: message`; with the trial's traceback it becomes
`Type in stage: message` (`staged`), the stage being the function the exception was raised
in. The exception's type and its stage are the error's signature (`error_signature`): the
same signature on the same model variant is the same deterministic failure. A reason that
starts with `batch.size=N:` refuses the batch size alone (`refuses_batch_only`: the model
takes a fixed batch), never the rest of the configuration.
"""

from __future__ import annotations

import re

# A shown reason is cut to this many characters.
SHOWN_CHARS = 160

_WORKER_ERROR = re.compile(r"^(?P<type>[A-Za-z_][\w.]*): (?P<message>.*)$", re.DOTALL)
_STAGED_ERROR = re.compile(r"^(?P<type>[A-Za-z_][\w.]*) in (?P<stage>[\w.<>]+): ")
_INNERMOST_FRAME = re.compile(r'^\s*File ".*", line \d+, in (?P<function>\S+)\s*$', re.MULTILINE)
_BATCH_REFUSAL = re.compile(r"^batch\.size=\d+: ")


def staged(reason: str | None, traceback: str | None) -> str | None:
    """An error reason `Type: message` as `Type in stage: message`, the stage being the
    innermost frame's function in `traceback`; any other reason as it is."""
    if reason is None or traceback is None or _STAGED_ERROR.match(reason):
        return reason
    error = _WORKER_ERROR.match(reason)
    frames = _INNERMOST_FRAME.findall(traceback)
    if error is None or not frames:
        return reason
    return f"{error['type']} in {frames[-1]}: {error['message']}"


def error_signature(reason: str | None) -> tuple[str, str] | None:
    """The exception type and the stage a staged error reason names, or None."""
    found = _STAGED_ERROR.match(reason or "")
    return None if found is None else (found["type"], found["stage"])


def refuses_batch_only(reason: str | None) -> bool:
    """Whether the reason refuses the configuration's batch size alone."""
    return _BATCH_REFUSAL.match(reason or "") is not None


def one_line(reason: str, limit: int = SHOWN_CHARS) -> str:
    """The reason on one line, cut to `limit` characters."""
    text = " ".join(reason.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
