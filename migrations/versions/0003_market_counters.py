"""Market counters and lineage: downloads and times ranked first per learnware; where a reuse
job's learnware came from.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("learnwares", schema=None) as batch_op:
        batch_op.add_column(sa.Column("download_count", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("ranked_first_count", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("lineage", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("learnwares", schema=None) as batch_op:
        batch_op.drop_column("lineage")
        batch_op.drop_column("ranked_first_count")
        batch_op.drop_column("download_count")
