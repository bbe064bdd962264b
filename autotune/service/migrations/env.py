"""Alembic environment of the service database (run through autotune.service.db.migrate)."""

from __future__ import annotations

import logging

import sqlalchemy
from alembic import context

from autotune.service.db import VERSION_TABLE, Base

logging.getLogger("alembic").setLevel(logging.WARNING)

engine = sqlalchemy.create_engine(context.config.attributes["url"])
with engine.connect() as connection:
    context.configure(
        connection=connection, target_metadata=Base.metadata, version_table=VERSION_TABLE
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
