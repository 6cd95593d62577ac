"""Jobs: when the broker took the job's current message.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Queued jobs of before this revision count as unpublished: the reaper sends each once more
(harmless, claims are guarded), which also frees those an earlier broker outage stranded.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"  # 0004_weights_fingerprint (devpath)
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("published_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("published_at")
