"""A covering index of what plan reads of a request's runs (its layouts' step times and tokens/s per GPU, their
clusters, when recorded): plan aggregates them from the index alone, without reading the rows, whose stored
records make them large. It starts with the request key, so it replaces ix_runs_request_key.

Revision ID: r0005
Revises: r0004
"""

from alembic import op

revision = "r0005"
down_revision = "r0004"
branch_labels = None
depends_on = None

MEASURED_COLUMNS = ["request_key", "outcome", "source", "layout_key", "tokens_per_s_per_gpu", "step_time_s", "id",
                    "cluster", "gpu_type", "recorded_at"]


def upgrade() -> None:
    op.create_index("ix_runs_measured", "runs", MEASURED_COLUMNS)
    op.drop_index("ix_runs_request_key", "runs")


def downgrade() -> None:
    op.create_index("ix_runs_request_key", "runs", ["request_key"])
    op.drop_index("ix_runs_measured", "runs")
