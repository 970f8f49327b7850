"""The unread index by category before site, mail-only entries in it: the pinned entries
and a page view's check are each a short range of it.

``ix_wikinotify_notifications_unread`` was ``(user_id, site_id, page_id, category) WHERE
read_at IS NULL AND in_app``. The list's pinned entries (an announcement, unread) and
mark-read-on-view's "what is unread on this page" name the user and the categories, not
the site; and the page view's check counts mail-only entries too (a view cancels their
mail), which the index left out. So each read every unread row of the reader's: at
100,000 of them, 100,000 table pages for every page of her inbox and every page of the
wiki she opened (docs/benchmarks.md#the-inbox-at-scale). As ``(user_id, category,
page_id, site_id, in_app) WHERE read_at IS NULL`` both are a range per category; the
badge's capped count (the user, the site, in-app) reads at most 100 of her entries,
from the index alone, either way.

On a large table, build the new index first with ``CREATE INDEX CONCURRENTLY`` under
another name, then drop the old and rename it (docs/operating.md#upgrading).

Revision ID: b2e6f4a8c1d7
Revises: d3f8b2a6c5e1
Create Date: 2026-12-05 05:10:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "b2e6f4a8c1d7"
down_revision = "d3f8b2a6c5e1"
branch_labels = None
depends_on = None

NAME = "ix_wikinotify_notifications_unread"
TABLE = "wikinotify_notifications"


def _index(columns: list[str], where: str) -> None:
    op.create_index(NAME, TABLE, columns, postgresql_where=sa.text(where),
                    sqlite_where=sa.text(where))


def upgrade() -> None:
    op.drop_index(NAME, table_name=TABLE)
    _index(["user_id", "category", "page_id", "site_id", "in_app"], "read_at IS NULL")


def downgrade() -> None:
    op.drop_index(NAME, table_name=TABLE)
    _index(["user_id", "site_id", "page_id", "category"], "read_at IS NULL AND in_app")
