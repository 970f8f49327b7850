"""Read marks: "mark all read" writes one row, a job writes it onto the entries.

``wikinotify_read_marks`` holds a reader's "mark all read" until the ``settle_read_marks``
job has set ``read_at`` on the entries it covers (docs/rules.md#read-marks): the request
writes one row instead of updating every unread entry of hers, which took 2 to 4 s for
100,000 scattered ones (docs/benchmarks.md#the-read-mark-session-14).

``ix_wikinotify_notifications_unread`` carries the id and the update time (``INCLUDE (id,
updated_at)`` on PostgreSQL), so the badge's counts tell a covered entry, and an unseen
one, from the index alone. SQLite's index holds the rowid (``id``) already: nothing is
rebuilt there.

On a large PostgreSQL table, build the new index first with ``CREATE INDEX CONCURRENTLY``
under another name, then drop the old and rename it (docs/operating.md#upgrading).

Revision ID: e9a4c2f7b1d3
Revises: c8e2f5a1d9b4
Create Date: 2026-12-05 13:30:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "e9a4c2f7b1d3"
down_revision = "c8e2f5a1d9b4"
branch_labels = None
depends_on = None

NAME = "ix_wikinotify_notifications_unread"
TABLE = "wikinotify_notifications"
COLUMNS = ["user_id", "category", "page_id", "site_id", "in_app"]


def _unread_index(include: list[str]) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index(NAME, table_name=TABLE)
    op.create_index(NAME, TABLE, COLUMNS, postgresql_where=sa.text("read_at IS NULL"),
                    postgresql_include=include)


def upgrade() -> None:
    op.create_table(
        "wikinotify_read_marks",
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("site_id", sa.String(64), nullable=True),
        sa.Column("through_id", sa.BigInteger(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_wikinotify_read_marks")),
    )
    _unread_index(["id", "updated_at"])


def downgrade() -> None:
    _unread_index([])
    op.drop_table("wikinotify_read_marks")
