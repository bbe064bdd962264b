"""Bearer tokens: created by a CLI command, stored only as hashes, revocable.

A token is 32 random bytes, so a plain SHA-256 of it is a safe verifier (no salt or slow
hash is needed for secrets that cannot be guessed).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import or_, select

from autotune.core.errors import NotFound, RequestError, Unauthorized
from autotune.service.db import Database, Job, Token, Watch, now

Owned = TypeVar("Owned", Job, Watch)

TOKEN_PREFIX = "at_"
NAME_RULE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's id, name and team. A job is visible to its token and,
    when the token has a team, to every token of that team."""

    token_id: int
    name: str
    team: str | None

    @property
    def namespace(self) -> str:
        """Whose jobs and registered models these are: the team's, or for a token without a
        team, the token's own (the same sharing as `can_see`)."""
        return namespace(self.name, self.team)

    def can_see(self, token_id: int, team: str | None) -> bool:
        return token_id == self.token_id or (team is not None and team == self.team)

    def sees(self, model: type[Job] | type[Watch]) -> Any:
        """The same rule as `can_see`, as a SQL condition on a job or watch table."""
        visible = model.token_id == self.token_id
        return or_(visible, model.team == self.team) if self.team is not None else visible

    def fetch(self, db: Database, model: type[Owned], row_id: str, noun: str) -> Owned:
        """The job or watch with this id, or with the one id among this caller's that starts
        with it (at least `MIN_PREFIX` characters); NotFound when there is none, when the
        prefix starts several, or when the id is not one the service makes (its databases
        refuse some characters, a NUL among them, before they could say there is none)."""
        wanted = row_id.strip().lower()
        if ID_PREFIX.fullmatch(wanted) is None:
            raise NotFound(
                f"no such {noun} {row_id[:80]!r} (give its id, or its first {MIN_PREFIX} or "
                "more characters)"
            )
        with db.transaction() as session:
            if len(wanted) == ROW_ID_LENGTH:
                row = session.get(model, wanted)
                if row is not None and self.can_see(row.token_id, row.team):
                    return row
                raise NotFound(f"no such {noun} {row_id!r}")
            query = select(model).where(model.id.startswith(wanted), self.sees(model)).limit(2)
            rows = list(session.scalars(query).all())
        if len(rows) > 1:
            raise NotFound(f"{noun} id prefix {row_id!r} is ambiguous: give more of the id")
        if not rows:
            raise NotFound(f"no such {noun} {row_id!r}")
        return rows[0]


# The ids the service gives jobs and watches (uuid4().hex), and the shortest prefix of one
# that names it.
ROW_ID_LENGTH = 32
MIN_PREFIX = 4
ID_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},{ROW_ID_LENGTH}}}")


def namespace(token_name: str, team: str | None) -> str:
    """'team~TEAM', or 'token~NAME' for a token without a team; '~' is in neither a team's
    nor a token's name, so two namespaces never read alike."""
    return f"team~{team}" if team is not None else f"token~{token_name}"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(db: Database, name: str, team: str | None = None) -> str:
    """A new token for `name`; the secret is returned once and never stored."""
    import re

    for field, value in (("name", name), ("team", team)):
        if value is not None and not re.match(NAME_RULE, value):
            raise RequestError(field, f"must match {NAME_RULE}", value)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.transaction() as session:
        if session.scalar(select(Token).where(Token.name == name)) is not None:
            raise RequestError("name", "must not name an existing token", name)
        session.add(Token(name=name, team=team, token_hash=_hash(secret), created_at=now()))
    return secret


def revoke_token(db: Database, name: str) -> None:
    with db.transaction() as session:
        token = session.scalar(select(Token).where(Token.name == name))
        if token is None:
            raise RequestError("name", "must name an existing token", name)
        if token.revoked_at is None:
            token.revoked_at = now()


def list_tokens(db: Database) -> list[dict[str, object]]:
    with db.transaction() as session:
        tokens = session.scalars(select(Token).order_by(Token.id)).all()
        return [
            {
                "name": t.name,
                "team": t.team,
                "created_at": t.created_at,
                "revoked": t.revoked_at is not None,
            }
            for t in tokens
        ]


def authenticate(db: Database, authorization: str | None) -> Principal:
    """The principal of an `Authorization: Bearer <token>` header value."""
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("an 'Authorization: Bearer <token>' header is required")
    digest = _hash(secret.strip())
    with db.transaction() as session:
        token = session.scalar(select(Token).where(Token.token_hash == digest))
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        raise Unauthorized("the token is not known")
    if token.revoked_at is not None:
        raise Unauthorized("the token was revoked")
    return Principal(token_id=token.id, name=token.name, team=token.team)
