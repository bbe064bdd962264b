"""What a client is shown of the server's files.

A job keeps the absolute paths its runner needs (and the server's log shows them); what the
API answers shows each path as the client can name it: a file under the models root by its
path relative to the root (as requests name it), an upload by its content id
(`upload:<sha256>`), the service's own files (job outputs, MLflow artifacts) by their path
relative to its data directory, and any other absolute path by its last name only
(`…/name`).

Where the service keeps its studies, runs and jobs is not the client's business: a URL
that names a host (`scheme://host…`) is shown as its scheme only (`postgresql+psycopg://…`)
when it is a database's, when it carries a user or a password, or when its host is one of
the service's own stores (its job database, study storage, MLflow tracking server and
artifact store, Ray cluster). A SQLite file is a path like any other
(`sqlite:///…/studies.db`). Where the operator gave the MLflow UI's public address
(`ServiceSettings.mlflow_ui_url`), the tracking URI is shown as that address, whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autotune.core.errors import RequestError
from autotune.requests.uploads import STORED_FILES
from autotune.service.settings import ServiceSettings

UPLOAD = "upload:"
ELIDED = "…"
# What ends a path inside a message: blanks, quotes, brackets, separators.
_STOP = r"\s'\"(),;\[\]{}<>"
# A path starts where no word, path or URL goes on before it.
_START = r"(?<![\w.\-/:~])"
_SCHEME = r"(?P<scheme>file://|sqlite:///)?"
_OTHER = rf"(?P<other>(?:/[^/{_STOP}]+){{2,}}/?)"
# A URL that names a host: its scheme, then its authority (user and password, host, port).
_URL = re.compile(
    rf"(?<![\w+.\-])(?P<scheme>[A-Za-z][\w+.\-]*)://(?P<authority>[^/?#{_STOP}]+)[^{_STOP}]*"
)
# Schemes (before a '+driver' or '+srv') whose URL names a database server.
DATABASE_SCHEMES = frozenset(
    {"postgresql", "postgres", "mysql", "mariadb", "mssql", "oracle", "cockroachdb"}
    | {"redis", "rediss", "mongodb"}
)
_STORED_NAMES = frozenset(STORED_FILES.values())


class ClientPaths:
    """Maps the server's absolute paths, wherever they appear in what the API answers, to
    what the client may see (the module's docstring says how)."""

    def __init__(
        self,
        models_root: Path | None,
        uploads_dir: Path,
        data_dir: Path,
        stores: Iterable[str] = (),
        tracking_shown_as: tuple[str, str] | None = None,
    ) -> None:
        """`stores`: the URLs (or Ray's `host:port`) of the service's own stores;
        `tracking_shown_as`: the tracking URI and the public address shown in its place."""
        self._store_hosts = frozenset(filter(None, map(_host, stores)))
        self._tracking_shown_as = tracking_shown_as
        self._renders = _renders(
            [(models_root, _relative), (uploads_dir, _upload), (data_dir, _relative)]
        )
        roots = sorted(self._renders, key=len, reverse=True)  # the most specific first
        known = "|".join(re.escape(root) for root in roots) or "(?!)"
        rooted = rf"(?P<root>{known})(?=[/{_STOP}]|$)(?P<tail>(?:/[^{_STOP}]*)?)"
        self._service_only = re.compile(rf"{_START}{_SCHEME}(?:{rooted})")
        self._every = re.compile(rf"{_START}{_SCHEME}(?:{rooted}|{_OTHER})")

    @classmethod
    def of(cls, settings: ServiceSettings) -> ClientPaths:
        stores = (
            settings.db,
            settings.storage,
            settings.tracking_uri,
            settings.mlflow_artifacts or "",
            settings.ray_address or "",
        )
        public = settings.mlflow_ui_url
        shown_as = None if public is None else (settings.tracking_uri, public.rstrip("/"))
        return cls(settings.models_root, settings.uploads_dir, settings.data_dir, stores, shown_as)

    def text(self, text: str, others: bool = True) -> str:
        """`text` with every server path in it shown to the client; without `others`, an
        absolute path under none of the service's directories is left as it is (a value the
        client wrote itself)."""
        pattern = self._every if others else self._service_only
        if self._tracking_shown_as is not None:
            text = text.replace(*self._tracking_shown_as)
        return pattern.sub(self._shown, _URL.sub(self._url_shown, text))

    def value(self, value: Any, others: bool = True) -> Any:
        """Every string in a JSON-like value (a tuned config, a status) passed through `text`."""
        if isinstance(value, str):
            return self.text(value, others)
        if isinstance(value, dict):
            return {key: self.value(item, others) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item, others) for item in value]
        return value

    def error(self, error: RequestError) -> RequestError:
        """A bad-input error as the client is shown it. Its value may be what the client
        wrote: an absolute path outside the service's directories is shown as written."""
        shown = type(error).__new__(type(error))
        RequestError.__init__(
            shown,
            self.text(error.field),
            self.text(error.rule),
            self.value(error.value, others=False),
        )
        return shown

    def _url_shown(self, match: re.Match[str]) -> str:
        scheme, authority = match["scheme"], match["authority"]
        public = self._tracking_shown_as
        if public is not None and f"{match[0]}/".startswith(f"{public[1]}/"):
            return match[0]
        hidden = (
            "@" in authority
            or scheme.lower().split("+")[0] in DATABASE_SCHEMES
            or _without_user(authority) in self._store_hosts
        )
        return f"{scheme}://{ELIDED}" if hidden else match[0]

    def _shown(self, match: re.Match[str]) -> str:
        scheme = match["scheme"] or ""
        kept = scheme if scheme == "sqlite:///" else ""
        if match["root"] is None:
            return f"{kept}{ELIDED}/{Path(match['other']).name}"
        return kept + self._renders[match["root"]](match["tail"].lstrip("/"))


def _host(store: str) -> str | None:
    """The `host[:port]` a store's URL (or Ray's bare `host:port`) names, or None (a file)."""
    match = _URL.fullmatch(store.strip())
    if match is not None:
        return _without_user(match["authority"])
    bare = store.strip()
    return bare.lower() if bare and "/" not in bare and ":" in bare else None


def _without_user(authority: str) -> str:
    return authority.rpartition("@")[2].lower()


def _renders(
    directories: list[tuple[Path | None, Callable[[str], str]]],
) -> dict[str, Callable[[str], str]]:
    """Each directory, as written (made absolute) and with its links resolved, and how a path
    under it is shown; the first directory given wins where two are the same."""
    renders: dict[str, Callable[[str], str]] = {}
    for directory, render in directories:
        if directory is None:
            continue
        for form in (directory.absolute(), directory.resolve()):
            if form != Path(form.anchor):  # a root of "/" would match every path
                renders.setdefault(str(form), render)
    return renders


def _relative(tail: str) -> str:
    return tail or "."


def _upload(tail: str) -> str:
    """`<sha256>/model.onnx` is the upload `upload:<sha256>`; another file of it (an ONNX
    model's external data) keeps its name after the id."""
    sha256, _, name = tail.partition("/")
    if name in _STORED_NAMES or not name:
        return UPLOAD + sha256
    return f"{UPLOAD}{sha256}/{name}"
