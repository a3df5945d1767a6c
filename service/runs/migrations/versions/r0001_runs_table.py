"""The runs table: the queried fields as columns, the whole record as JSON.

Revision ID: r0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "r0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("content_key", sa.String(64), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("gpu_type", sa.String(256), nullable=False),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("team", sa.String(4096), nullable=True),
        sa.Column("cluster", sa.String(4096), nullable=True),
        sa.Column("config_hash", sa.String(128), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.UniqueConstraint("content_key", name="uq_runs_content_key"),
    )
    op.create_index("ix_runs_model", "runs", ["model"])
    op.create_index("ix_runs_config_hash", "runs", ["config_hash"])


def downgrade() -> None:
    op.drop_table("runs")
