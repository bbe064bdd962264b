"""`autotune token`: the service's API tokens, managed in its database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, cast

import typer
from rich.table import Table

from autotune.cli.shared import AsJson, ServiceDb, _exit_codes, command_group, err, out

token_app = command_group(
    "Manage the service's API tokens.\n\nRun where the service database is reachable."
)


@contextmanager
def _service_database(url: str | None, read_only: bool = False) -> Iterator[Any]:
    """The service database; `read_only` for a command that only reads: it must exist, and
    it is neither created nor migrated."""
    from autotune.service.db import Database
    from autotune.service.settings import ServiceSettings

    database = Database(url or ServiceSettings().db, read_only=read_only, field="--db")
    try:
        yield database
    finally:
        database.close()


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="who the token is for")],
    team: Annotated[
        str | None, typer.Option(help="tokens of one team see each other's jobs")
    ] = None,
    db: ServiceDb = None,
) -> None:
    """Create a token and print it.

    It is shown this once: only its hash is stored."""
    from autotune.service.tokens import create_token

    with _exit_codes(), _service_database(db) as database:
        secret = create_token(database, name, team)
    print(secret)
    err.print(
        "Shown once. A client passes it with --token, the AUTOTUNE_TOKEN variable "
        "(export AUTOTUNE_TOKEN=<token>) or the file ~/.config/autotune/token.",
        highlight=False,
    )


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    db: ServiceDb = None,
) -> None:
    """Revoke a token: the server refuses it from now on."""
    from autotune.service.tokens import revoke_token

    with _exit_codes(), _service_database(db) as database:
        revoke_token(database, name)
    err.print(f"token {name!r} revoked", highlight=False)


@token_app.command("list")
def token_list(db: ServiceDb = None, as_json: AsJson = False) -> None:
    """List the tokens: names, teams and whether revoked.

    Never their secrets: only their hashes are stored."""
    from autotune.service.tokens import list_tokens

    with _exit_codes(), _service_database(db, read_only=True) as database:
        tokens = list_tokens(database)
    if as_json:
        print(json.dumps(tokens, indent=2))
        return
    table = Table(title=f"{len(tokens)} tokens")
    for column in ("name", "team", "created", "revoked"):
        table.add_column(column)
    for t in tokens:
        created = _iso(cast(float, t["created_at"]))
        table.add_row(str(t["name"]), str(t["team"] or ""), created, "yes" if t["revoked"] else "")
    out.print(table)


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")
