"""Digests at the reader's local time: a time zone on each schedule, weekdays counted from 0.

``timezone`` is the IANA name the reader chose (NULL: the account's, then the site's, then
UTC, resolved when a send time is computed). ``weekday`` now counts as Python's
``date.weekday()`` and the API do, Monday = 0, so nothing translates between the two;
rows written before this revision held ISO weekdays (Monday = 1) and are shifted down.

Revision ID: b7d3e9f1a2c4
Revises: 861c6e904ccc
Create Date: 2026-12-01 08:00:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "b7d3e9f1a2c4"
down_revision = "861c6e904ccc"
branch_labels = None
depends_on = None

TABLE = "wikinotify_email_schedules"
WEEKDAY_CHECK = "ck_wikinotify_email_schedules_weekday"


def _shift_weekdays(new_check: str, by: int) -> None:
    # The old CHECK goes before the rows move and the new one comes after: in between, a
    # row may hold a value that only one of the two allows (0 under ISO, 7 under 0-6).
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_constraint(op.f(WEEKDAY_CHECK), type_="check")
    op.execute(sa.text(f"UPDATE {TABLE} SET weekday = weekday + :by WHERE weekday IS NOT NULL")
               .bindparams(by=by))
    with op.batch_alter_table(TABLE) as batch:
        batch.create_check_constraint(op.f(WEEKDAY_CHECK), new_check)


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.add_column(sa.Column("timezone", sa.String(64), nullable=True))
    _shift_weekdays("weekday IS NULL OR weekday BETWEEN 0 AND 6", by=-1)


def downgrade() -> None:
    _shift_weekdays("weekday IS NULL OR weekday BETWEEN 1 AND 7", by=1)
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column("timezone")
