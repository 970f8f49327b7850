"""Split fan-outs: an event's audience cut into ranges that workers fan out in parallel.

``wikinotify_fanout_ranges`` holds one row per range of a split event, with its own
cursor, lease and attempts; ``wikinotify_events.ranges`` says how many there are (NULL
for an event one run fans out), and keeps a split event from being claimed itself.

Revision ID: f7c2a9e4b6d8
Revises: e5b1c7d9a3f2
Create Date: 2026-12-01 11:00:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "f7c2a9e4b6d8"
down_revision = "e5b1c7d9a3f2"
branch_labels = None
depends_on = None

#: Written out, not imported from wikinotify.models: a revision is a snapshot.
HOST_ID = sa.String(64)
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)
OPEN = "done_at IS NULL AND failed_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("wikinotify_events") as batch:
        batch.add_column(sa.Column("ranges", sa.Integer(), nullable=True))
    op.create_table(
        "wikinotify_fanout_ranges",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        sa.Column("event_id", ROW_ID, nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("lower", HOST_ID, nullable=True),
        sa.Column("upper", HOST_ID, nullable=True),
        sa.Column("cursor", HOST_ID, nullable=True),
        sa.Column("claimed_at", TIMESTAMP, nullable=True),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("done_at", TIMESTAMP, nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("retry_after", TIMESTAMP, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("failed_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["event_id"], ["wikinotify_events.id"], ondelete="CASCADE",
            name=op.f("fk_wikinotify_fanout_ranges_event_id_wikinotify_events"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wikinotify_fanout_ranges")),
        sa.UniqueConstraint("event_id", "number",
                            name=op.f("uq_wikinotify_fanout_ranges_event_id")),
    )
    op.create_index("ix_wikinotify_fanout_ranges_open", "wikinotify_fanout_ranges",
                    ["event_id", "number"], postgresql_where=sa.text(OPEN),
                    sqlite_where=sa.text(OPEN))


def downgrade() -> None:
    op.drop_index("ix_wikinotify_fanout_ranges_open", table_name="wikinotify_fanout_ranges")
    op.drop_table("wikinotify_fanout_ranges")
    with op.batch_alter_table("wikinotify_events") as batch:
        batch.drop_column("ranges")
