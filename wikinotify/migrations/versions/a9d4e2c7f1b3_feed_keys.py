"""Feed keys: the version of each reader's Atom feed link.

One row per user, made when her preferences page first shows the link; resetting the link
writes a new random version, which every older token no longer matches.

Revision ID: a9d4e2c7f1b3
Revises: f7c2a9e4b6d8
Create Date: 2026-12-04 23:55:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "a9d4e2c7f1b3"
down_revision = "f7c2a9e4b6d8"
branch_labels = None
depends_on = None

#: Written out, not imported from wikinotify.models: a revision is a snapshot.
HOST_ID = sa.String(64)
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "wikinotify_feed_keys",
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_wikinotify_feed_keys")),
    )


def downgrade() -> None:
    op.drop_table("wikinotify_feed_keys")
