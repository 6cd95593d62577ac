"""Learnwares: the weights fingerprint that refuses the same model twice.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: learnwares submitted before this revision have no fingerprint (their packages
    # would have to be read from the store to compute one) and are not matched against.
    with op.batch_alter_table("learnwares", schema=None) as batch_op:
        batch_op.add_column(sa.Column("weights_sha256", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_learnwares_weights_sha256"), ["weights_sha256"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("learnwares", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_learnwares_weights_sha256"))
        batch_op.drop_column("weights_sha256")
