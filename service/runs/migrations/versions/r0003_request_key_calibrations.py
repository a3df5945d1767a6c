"""The request a run answers as an indexed key (plan finds a request's runs without reading the others), and a
table of fitted calibrations (refitted only when a group's runs change).

Revision ID: r0003
Revises: r0002
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "r0003"
down_revision = "r0002"
branch_labels = None
depends_on = None

_ENGINE = {"automodel": "bundled"}


def _request_key(record: dict) -> str:
    # service.runs.keys.request_key as of this revision (a migration keeps its own copy of what it computes)
    r, engine = record["request"], record.get("provenance", {}).get("engine", "bundled")
    world = r["gpus_per_node"] * r.get("nodes", 1)
    text = "|".join(map(str, (r["model"], r["gpu_type"], world, r.get("goal", "pretrain"), r["seq_length"],
                              r["global_batch_size"], r.get("precision", "bf16"), _ENGINE.get(engine, engine))))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("request_key", sa.String(32), nullable=True))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("record", sa.Text),
                    sa.column("request_key", sa.String))
    bind = op.get_bind()
    for row_id, record in bind.execute(sa.select(runs.c.id, runs.c.record)).all():
        bind.execute(runs.update().where(runs.c.id == row_id).values(request_key=_request_key(json.loads(record))))
    op.create_index("ix_runs_request_key", "runs", ["request_key"])
    op.create_table(
        "calibrations",
        sa.Column("group_key", sa.String(1024), primary_key=True),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("newest_run_id", sa.Integer, nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("calibrations")
    op.drop_index("ix_runs_request_key", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("request_key")
