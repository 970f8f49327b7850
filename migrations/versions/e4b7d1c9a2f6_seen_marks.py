"""Seen marks: one row per user, when they last opened the bell menu or the inbox (the
badge counts what came after).

Revision ID: e4b7d1c9a2f6
Revises: 7c2e9a41d5b3
Create Date: 2026-12-02 10:00:00

"""
import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = 'e4b7d1c9a2f6'
down_revision = '7c2e9a41d5b3'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('wikinotify_seen',
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('user_id', name=op.f('pk_wikinotify_seen'))
    )


def downgrade():
    op.drop_table('wikinotify_seen')
