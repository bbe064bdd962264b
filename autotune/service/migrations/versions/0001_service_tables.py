"""Tokens, watches and jobs.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("team", sa.String(100), nullable=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
    )
    op.create_table(
        "watches",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("token_id", sa.Integer(), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("team", sa.String(100), nullable=True),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("base_dir", sa.Text(), nullable=False),
        sa.Column("every_s", sa.Float(), nullable=True),
        sa.Column("cron", sa.String(100), nullable=True),
        sa.Column("next_run_at", sa.Float(), nullable=False, index=True),
        sa.Column("last_model_fingerprint", sa.String(200), nullable=True),
        sa.Column("last_hardware_fingerprint", sa.String(64), nullable=True),
        sa.Column("last_checked_at", sa.Float(), nullable=True),
        sa.Column("last_job_id", sa.String(32), nullable=True),
        sa.Column("retune_trials", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("token_id", sa.Integer(), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("team", sa.String(100), nullable=True),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("base_dir", sa.Text(), nullable=False),
        sa.Column("model_source", sa.JSON(), nullable=False),
        sa.Column("model_sha256", sa.String(200), nullable=False),
        sa.Column("hardware_fingerprint", sa.String(64), nullable=False),
        sa.Column("dedupe_key", sa.String(64), nullable=False, index=True),
        sa.Column("active_key", sa.String(64), nullable=True, unique=True),
        sa.Column("study_name", sa.String(100), nullable=False),
        sa.Column("watch_id", sa.String(32), sa.ForeignKey("watches.id"), nullable=True),
        sa.Column("warm_start_from", sa.String(32), nullable=True),
        sa.Column("budget_trials", sa.Integer(), nullable=True),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("best", sa.JSON(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("registered_model", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False, index=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("jobs")
    op.drop_table("watches")
    op.drop_table("tokens")
