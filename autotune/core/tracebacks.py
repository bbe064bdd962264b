"""A failure's traceback as a trial carries it: the tail, where the error was raised. Both
planes trim the same way: a worker its own error, the executor the text Ray gives of a remote
one."""

from __future__ import annotations

import traceback

from autotune.core.contract import MAX_TRACEBACK_CHARS


def traceback_tail(text: str, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """The last `limit` characters: the innermost frames and the error itself."""
    return text[-limit:]


def story(error: BaseException) -> str:
    """The error's traceback, its last frames where it is long."""
    return traceback_tail("".join(traceback.format_exception(error)))
