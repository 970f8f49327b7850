"""Mutes: a page, or a person, a user no longer wants to hear about.

One row per (user, kind, target); the fan-out reads the rows of a candidate batch in one
query, by the primary key's leading ``user_id``.

Revision ID: c4a8f2e6d1b9
Revises: b7d3e9f1a2c4
Create Date: 2026-12-01 08:40:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "c4a8f2e6d1b9"
down_revision = "b7d3e9f1a2c4"
branch_labels = None
depends_on = None

#: Written out, not imported from wikinotify.models: a revision is a snapshot.
HOST_ID = sa.String(64)
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "wikinotify_mutes",
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("target_id", HOST_ID, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("kind IN ('page', 'user')", name=op.f("ck_wikinotify_mutes_kind")),
        sa.PrimaryKeyConstraint("user_id", "kind", "target_id",
                                name=op.f("pk_wikinotify_mutes")),
    )


def downgrade() -> None:
    op.drop_table("wikinotify_mutes")
