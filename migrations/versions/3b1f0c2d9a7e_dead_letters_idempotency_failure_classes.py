"""Dead letters, idempotency keys and mail failure classes.

Events get an attempt count, a back-off time, the last error and a failed time (a dead
letter an administrator can retry), and an optional idempotency key unique per kind.
Notification rows record the class of their last mail failure.

Revision ID: 3b1f0c2d9a7e
Revises: fe21e105fa3b
Create Date: 2026-12-01 05:20:00

"""
import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = '3b1f0c2d9a7e'
down_revision = 'fe21e105fa3b'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('wikinotify_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('attempts', sa.Integer(), server_default='0',
                                      nullable=False))
        batch_op.add_column(sa.Column('retry_after', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('error', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('failed_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('key', sa.String(length=255), nullable=True))
        batch_op.create_index('uq_wikinotify_events_kind_key', ['kind', 'key'], unique=True,
                              postgresql_where=sa.text('key IS NOT NULL'),
                              sqlite_where=sa.text('key IS NOT NULL'))
    with op.batch_alter_table('wikinotify_notifications', schema=None) as batch_op:
        batch_op.add_column(sa.Column('email_error_class', sa.String(length=16), nullable=True))


def downgrade():
    with op.batch_alter_table('wikinotify_notifications', schema=None) as batch_op:
        batch_op.drop_column('email_error_class')
    with op.batch_alter_table('wikinotify_events', schema=None) as batch_op:
        batch_op.drop_index('uq_wikinotify_events_kind_key',
                            postgresql_where=sa.text('key IS NOT NULL'),
                            sqlite_where=sa.text('key IS NOT NULL'))
        batch_op.drop_column('key')
        batch_op.drop_column('failed_at')
        batch_op.drop_column('error')
        batch_op.drop_column('retry_after')
        batch_op.drop_column('attempts')
