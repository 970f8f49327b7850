"""No index on the entries' update time: retention and withdrawing an announcement walk the
primary key, whose ids rise with time.

``ix_wikinotify_notifications_updated`` ``(updated_at, id)`` served retention's walk from
the oldest entry and the withdrawal's "entries written since the announcement". Every
entry written paid an entry in it, and so did every entry read: reading is a new row
version, which PostgreSQL cannot make HOT (``read_at`` is in two partial indexes'
predicates), so "mark all read" of 100,000 scattered entries inserted 100,000 index
entries all over a 40,000-page index, about 40% of its time at ten million rows
(docs/benchmarks.md#the-inbox-at-scale). Entry ids are handed out in the order entries
are written, so both walks now bound the primary key by bisecting it
(``wikinotify.inbox.retention.written_before``).

Dropping an index is quick; the downgrade builds it again (on a large table, with
``CREATE INDEX CONCURRENTLY`` by hand first, docs/operating.md#upgrading).

Revision ID: c8e2f5a1d9b4
Revises: b2e6f4a8c1d7
Create Date: 2026-12-05 08:00:00

"""

from __future__ import annotations

from alembic import op

# revision identifiers, used by Alembic.
revision = "c8e2f5a1d9b4"
down_revision = "b2e6f4a8c1d7"
branch_labels = None
depends_on = None

NAME = "ix_wikinotify_notifications_updated"
TABLE = "wikinotify_notifications"


def upgrade() -> None:
    op.drop_index(NAME, table_name=TABLE)


def downgrade() -> None:
    op.create_index(NAME, TABLE, ["updated_at", "id"])
