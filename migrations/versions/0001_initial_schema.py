"""Initial schema: api keys, spec spaces, specs, learnwares, user tasks, jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('role', sa.Enum('developer', 'user', 'admin', name='role', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_by_id', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['created_by_id'], ['api_keys.id'], name=op.f('fk_api_keys_created_by_id_api_keys'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('key_hash', name=op.f('uq_api_keys_key_hash')),
    sa.UniqueConstraint('prefix', name=op.f('uq_api_keys_prefix'))
    )
    op.create_table('spec_spaces',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('dim', sa.Integer(), nullable=False),
    sa.Column('config', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('description', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('index_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('dim > 0', name=op.f('ck_spec_spaces_dim_positive')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_spec_spaces'))
    )
    op.create_table('specs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('space_id', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.Enum('model', 'task', name='spec_kind', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('source', sa.Enum('computed', 'uploaded', name='spec_source', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('dim', sa.Integer(), nullable=False),
    sa.Column('vector', sa.LargeBinary(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('meta', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('dim > 0', name=op.f('ck_specs_dim_positive')),
    sa.ForeignKeyConstraint(['space_id'], ['spec_spaces.id'], name=op.f('fk_specs_space_id_spec_spaces')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_specs'))
    )
    with op.batch_alter_table('specs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_specs_space_id'), ['space_id'], unique=False)

    op.create_table('learnwares',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('owner_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.Enum('pending', 'validating', 'fitting', 'awaiting_review', 'ready', 'rejected', 'failed', 'deleted', name='learnware_status', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('tags', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('task_type', sa.String(length=64), nullable=False),
    sa.Column('label_names', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('model_format', sa.String(length=32), nullable=False),
    sa.Column('base_model', sa.String(length=200), nullable=True),
    sa.Column('license', sa.String(length=100), nullable=True),
    sa.Column('manifest', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('package_sha256', sa.String(length=64), nullable=False),
    sa.Column('package_size', sa.BigInteger(), nullable=False),
    sa.Column('space_id', sa.String(length=64), nullable=False),
    sa.Column('spec_id', sa.Integer(), nullable=True),
    sa.Column('uploaded_spec_id', sa.Integer(), nullable=True),
    sa.Column('spec_recomputed', sa.Boolean(), nullable=True),
    sa.Column('predictions_sha256', sa.String(length=64), nullable=True),
    sa.Column('validation_log', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('index_seq', sa.BigInteger(), nullable=True),
    sa.Column('ready_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('package_size >= 0', name=op.f('ck_learnwares_package_size_nonnegative')),
    sa.ForeignKeyConstraint(['owner_id'], ['api_keys.id'], name=op.f('fk_learnwares_owner_id_api_keys'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['space_id'], ['spec_spaces.id'], name=op.f('fk_learnwares_space_id_spec_spaces')),
    sa.ForeignKeyConstraint(['spec_id'], ['specs.id'], name=op.f('fk_learnwares_spec_id_specs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['uploaded_spec_id'], ['specs.id'], name=op.f('fk_learnwares_uploaded_spec_id_specs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_learnwares'))
    )
    with op.batch_alter_table('learnwares', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_learnwares_owner_id'), ['owner_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_learnwares_package_sha256'), ['package_sha256'], unique=False)
        batch_op.create_index(batch_op.f('ix_learnwares_space_id'), ['space_id'], unique=False)
        batch_op.create_index('ix_learnwares_space_index_seq', ['space_id', 'index_seq'], unique=False)
        batch_op.create_index(batch_op.f('ix_learnwares_status'), ['status'], unique=False)

    op.create_table('user_tasks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('owner_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.Enum('pending', 'running', 'ready', 'failed', name='task_status', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('label_names', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('examples', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=True),
    sa.Column('n_examples', sa.Integer(), nullable=False),
    sa.Column('space_id', sa.String(length=64), nullable=False),
    sa.Column('spec_id', sa.Integer(), nullable=True),
    sa.Column('top_k', sa.Integer(), nullable=False),
    sa.Column('results', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=True),
    sa.Column('index_version', sa.BigInteger(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('identified_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('top_k > 0', name=op.f('ck_user_tasks_top_k_positive')),
    sa.ForeignKeyConstraint(['owner_id'], ['api_keys.id'], name=op.f('fk_user_tasks_owner_id_api_keys'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['space_id'], ['spec_spaces.id'], name=op.f('fk_user_tasks_space_id_spec_spaces')),
    sa.ForeignKeyConstraint(['spec_id'], ['specs.id'], name=op.f('fk_user_tasks_spec_id_specs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_user_tasks'))
    )
    with op.batch_alter_table('user_tasks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_user_tasks_owner_id'), ['owner_id'], unique=False)

    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=48), nullable=False),
    sa.Column('stage', sa.String(length=48), nullable=False),
    sa.Column('queue', sa.String(length=32), nullable=False),
    sa.Column('state', sa.Enum('queued', 'running', 'succeeded', 'failed', 'cancelled', name='job_state', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('progress', sa.Double(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('log', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=False),
    sa.Column('result', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('owner_id', sa.Integer(), nullable=True),
    sa.Column('learnware_id', sa.Integer(), nullable=True),
    sa.Column('task_id', sa.Integer(), nullable=True),
    sa.Column('space_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint('attempts >= 0', name=op.f('ck_jobs_attempts_nonnegative')),
    sa.CheckConstraint('progress >= 0 AND progress <= 1', name=op.f('ck_jobs_progress_range')),
    sa.ForeignKeyConstraint(['learnware_id'], ['learnwares.id'], name=op.f('fk_jobs_learnware_id_learnwares'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['owner_id'], ['api_keys.id'], name=op.f('fk_jobs_owner_id_api_keys'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['space_id'], ['spec_spaces.id'], name=op.f('fk_jobs_space_id_spec_spaces')),
    sa.ForeignKeyConstraint(['task_id'], ['user_tasks.id'], name=op.f('fk_jobs_task_id_user_tasks'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_kind'), ['kind'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_owner_id'), ['owner_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_state'), ['state'], unique=False)
        batch_op.create_index('ix_jobs_state_heartbeat', ['state', 'heartbeat_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_state_heartbeat')
        batch_op.drop_index(batch_op.f('ix_jobs_state'))
        batch_op.drop_index(batch_op.f('ix_jobs_owner_id'))
        batch_op.drop_index(batch_op.f('ix_jobs_kind'))

    op.drop_table('jobs')
    with op.batch_alter_table('user_tasks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_user_tasks_owner_id'))

    op.drop_table('user_tasks')
    with op.batch_alter_table('learnwares', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_learnwares_status'))
        batch_op.drop_index('ix_learnwares_space_index_seq')
        batch_op.drop_index(batch_op.f('ix_learnwares_space_id'))
        batch_op.drop_index(batch_op.f('ix_learnwares_package_sha256'))
        batch_op.drop_index(batch_op.f('ix_learnwares_owner_id'))

    op.drop_table('learnwares')
    with op.batch_alter_table('specs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_specs_space_id'))

    op.drop_table('specs')
    op.drop_table('spec_spaces')
    op.drop_table('api_keys')
