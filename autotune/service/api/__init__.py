"""The REST API: jobs and watches over HTTP; every route but /healthz needs a bearer token
(the documentation too, unless the server was started with `--public-docs`).

Errors keep one shape: bad input is `{"detail": {"field", "rule", "value"}}` (422, or 413
when something is too large); a missing or bad token is 401, an unknown job (or another
team's) 404, a job whose state does not allow the call 409, and any call while the job
database is unreachable, or a submission while every request parser is busy or no trial node
is alive, 503.
"""

from autotune.service.api.app import create_app
from autotune.service.documents import MAX_DOCUMENT_BYTES

__all__ = ["MAX_DOCUMENT_BYTES", "create_app"]
