"""Release and source as columns (calibration groups by release; published rows stay apart from yours),
filled from the stored records; one index for plan's lookup of a request's runs.

Revision ID: r0002
Revises: r0001
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "r0002"
down_revision = "r0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("release", sa.String(4096), nullable=True))
        batch.add_column(sa.Column("source", sa.String(16), nullable=False, server_default="yours"))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("record", sa.Text),
                    sa.column("release", sa.String), sa.column("source", sa.String))
    bind = op.get_bind()
    for row_id, record in bind.execute(sa.select(runs.c.id, runs.c.record)).all():
        provenance = json.loads(record).get("provenance", {})
        bind.execute(runs.update().where(runs.c.id == row_id).values(
            release=provenance.get("release"), source=provenance.get("source", "yours")))
    op.create_index("ix_runs_request", "runs", ["model", "gpu_type", "engine"])


def downgrade() -> None:
    op.drop_index("ix_runs_request", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("source")
        batch.drop_column("release")
