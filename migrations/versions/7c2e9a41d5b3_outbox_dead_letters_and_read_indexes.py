"""Indexes for the dead letters, the admin status and retention.

The unprocessed-events index leaves dead letters out (they wait for an administrator, not
a worker); failed events, processed events, mail by when it was sent or given up, and
entries by their last update each get the index their reader walks.

Revision ID: 7c2e9a41d5b3
Revises: 3b1f0c2d9a7e
Create Date: 2026-12-01 07:10:00

"""
import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = '7c2e9a41d5b3'
down_revision = '3b1f0c2d9a7e'
branch_labels = None
depends_on = None

UNPROCESSED_BEFORE = sa.text('processed_at IS NULL')
UNPROCESSED = sa.text('processed_at IS NULL AND failed_at IS NULL')
FAILED = sa.text('failed_at IS NOT NULL')
PROCESSED = sa.text('processed_at IS NOT NULL')
EMAILED = sa.text("email_state IN ('sent', 'failed')")


def _where(predicate):
    return {'postgresql_where': predicate, 'sqlite_where': predicate}


def upgrade():
    with op.batch_alter_table('wikinotify_events', schema=None) as batch_op:
        batch_op.drop_index('ix_wikinotify_events_unprocessed', **_where(UNPROCESSED_BEFORE))
        batch_op.create_index('ix_wikinotify_events_unprocessed', ['created_at'],
                              **_where(UNPROCESSED))
        batch_op.create_index('ix_wikinotify_events_failed', ['failed_at', 'id'],
                              **_where(FAILED))
        batch_op.create_index('ix_wikinotify_events_processed', ['processed_at'],
                              **_where(PROCESSED))
    with op.batch_alter_table('wikinotify_notifications', schema=None) as batch_op:
        batch_op.create_index('ix_wikinotify_notifications_emailed',
                              ['email_state', 'emailed_at', 'id'], **_where(EMAILED))
        batch_op.create_index('ix_wikinotify_notifications_updated', ['updated_at', 'id'])


def downgrade():
    with op.batch_alter_table('wikinotify_notifications', schema=None) as batch_op:
        batch_op.drop_index('ix_wikinotify_notifications_updated')
        batch_op.drop_index('ix_wikinotify_notifications_emailed', **_where(EMAILED))
    with op.batch_alter_table('wikinotify_events', schema=None) as batch_op:
        batch_op.drop_index('ix_wikinotify_events_processed', **_where(PROCESSED))
        batch_op.drop_index('ix_wikinotify_events_failed', **_where(FAILED))
        batch_op.drop_index('ix_wikinotify_events_unprocessed', **_where(UNPROCESSED))
        batch_op.create_index('ix_wikinotify_events_unprocessed', ['created_at'],
                              **_where(UNPROCESSED_BEFORE))
