"""Three indexes a fan-out of many batches stops in, reading once for its run what every
batch asked again (wikinotify.pipeline.audience.read_for_run).

A fan-out asked four of wikinotify's tables once per batch of 5,000 candidates, each
read joining the batch's ids: who muted the page or the actor, the category's stored
preferences, the readers' endpoints, their email schedules; about 7 ms a batch on
SQLite, on the critical path of a 10,000-watcher fan-out, and paid 100 times and more by
a million watchers (docs/benchmarks.md). A run of more than one batch now reads each
table's rows that can matter to its event once, at most a batch's worth: the read must
stop at that cap whatever the table holds, so each needs an index that starts where it
asks.

- ``ix_wikinotify_mutes_target`` ``(kind, target_id, user_id)``: the mutes of one page or
  one person; the primary key starts with the muter.
- ``ix_wikinotify_preferences_category`` ``(category, user_id)``: a category's rows, on
  and off; the partial index on the enabled rows leaves the rows turned off out.
- ``ix_wikinotify_endpoints_state`` ``(state, owner_id)``: the active endpoints of users;
  the owner index starts with the owner, and would walk past every disabled endpoint.

Each costs a write where a reader saves a mute, a preference or an endpoint, which are a
person's clicks, never a fan-out's. The schedules' read is capped by their primary key.

Revision ID: f3b8d1e6a2c9
Revises: e9a4c2f7b1d3
Create Date: 2026-12-06 04:20:00

"""

from __future__ import annotations

from alembic import op

# revision identifiers, used by Alembic.
revision = "f3b8d1e6a2c9"
down_revision = "e9a4c2f7b1d3"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_wikinotify_mutes_target": ("wikinotify_mutes", ["kind", "target_id", "user_id"]),
    "ix_wikinotify_preferences_category": ("wikinotify_preferences", ["category", "user_id"]),
    "ix_wikinotify_endpoints_state": ("wikinotify_endpoints", ["state", "owner_id"]),
}


def upgrade() -> None:
    for name, (table, columns) in INDEXES.items():
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, (table, _) in INDEXES.items():
        op.drop_index(name, table_name=table)
