"""What plan reads of a run as columns (its layout key, step time and tokens/s per GPU), so a request's
measurements are read without parsing whole records; an index for the calibration groups of a GPU type.

Revision ID: r0004
Revises: r0003
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "r0004"
down_revision = "r0003"
branch_labels = None
depends_on = None


def _measured(record: dict) -> dict:
    # service.runs.keys.layout_text and RunRecord.measured_tokens_per_s_per_gpu as of this revision
    lay, m, r = record.get("layout", {}), record.get("measurement", {}), record["request"]
    key = ",".join(str(v) for v in (lay.get("tp", 1), lay.get("pp", 1), lay.get("vp") or 1, lay.get("cp", 1),
                                    lay.get("ep", 1), lay.get("etp") or 1, lay.get("micro_batch_size", 1),
                                    lay.get("sharding", "none")))
    speed, step = m.get("tokens_per_s_per_gpu"), m.get("step_time_s")
    if speed is None and step:
        speed = r["global_batch_size"] * r["seq_length"] / step / (r["gpus_per_node"] * r.get("nodes", 1))
    return {"layout_key": key, "step_time_s": step, "tokens_per_s_per_gpu": speed}


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("layout_key", sa.String(128), nullable=True))
        batch.add_column(sa.Column("step_time_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("tokens_per_s_per_gpu", sa.Float, nullable=True))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("record", sa.Text),
                    sa.column("layout_key", sa.String), sa.column("step_time_s", sa.Float),
                    sa.column("tokens_per_s_per_gpu", sa.Float))
    bind = op.get_bind()
    for row_id, record in bind.execute(sa.select(runs.c.id, runs.c.record)).all():
        bind.execute(runs.update().where(runs.c.id == row_id).values(**_measured(json.loads(record))))
    # covering: plan's count of a GPU type's calibration groups reads this index alone
    op.create_index("ix_runs_groups", "runs", ["gpu_type", "engine", "outcome", "source", "cluster", "release"])


def downgrade() -> None:
    op.drop_index("ix_runs_groups", "runs")
    with op.batch_alter_table("runs") as batch:
        for name in ("tokens_per_s_per_gpu", "step_time_s", "layout_key"):
            batch.drop_column(name)
