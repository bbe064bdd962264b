"""Each watch's checks, what a re-tune changed, and where a watch posts a job's end.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "watch_checks",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("watch_id", sa.String(32), sa.ForeignKey("watches.id"), nullable=False),
        sa.Column("checked_at", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("change", sa.JSON(), nullable=True),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
    )
    op.create_index("ix_watch_checks_watch_id", "watch_checks", ["watch_id"])
    op.add_column("jobs", sa.Column("retune", sa.JSON(), nullable=True))
    op.add_column("watches", sa.Column("notify_url", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("watches", "notify_url")
    op.drop_column("jobs", "retune")
    op.drop_index("ix_watch_checks_watch_id", "watch_checks")
    op.drop_table("watch_checks")
