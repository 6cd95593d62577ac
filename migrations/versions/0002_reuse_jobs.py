"""Reuse jobs: job parameters, private learnwares.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("params", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True)
        )
    with op.batch_alter_table("learnwares", schema=None) as batch_op:
        batch_op.add_column(sa.Column("private", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("learnwares", schema=None) as batch_op:
        batch_op.drop_column("private")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("params")
