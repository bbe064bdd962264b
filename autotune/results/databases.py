"""Reading a database without creating it: what read-only commands and routes open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.core.errors import RequestError


def require_existing(url: str, field: str, tables: frozenset[str], holds: str) -> None:
    """Raise a RequestError naming `field` unless the database at `url` exists (a SQLite file
    is never created by looking) and has all of `tables`; `holds` says what it should hold.
    The URL is shown without its password."""
    import sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise RequestError(field, "must be a SQLAlchemy database URL", url) from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and not (
        parsed.database and Path(parsed.database).is_file()
    ):
        raise RequestError(
            field, f"must name an existing SQLite file holding {holds} (a read creates none)", shown
        )
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as connection:
            present = set(sqlalchemy.inspect(connection).get_table_names())
    finally:
        engine.dispose()
    if not tables <= present:
        raise RequestError(field, f"must be a database holding {holds}", shown)


def fast_sqlite(engine: Any) -> None:
    """WAL journal, and commits that do not wait for the disk (`synchronous=NORMAL`): a
    process that dies loses nothing committed; a power cut may lose the last commits."""
    from sqlalchemy import event

    def on_connect(connection: Any, record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections made before the listener
