"""wikinotify's schema: every ``wikinotify_*`` table, and the instance settings row.

The base of the ``wikinotify`` branch. wikinotify is unreleased (before 1.0), so this one
revision states the whole current schema; every change from now on is a revision of its
own on top of it (see wikinotify/migrations/__init__.py).

Partial indexes carry their predicate for PostgreSQL and for SQLite alike, as
``wikinotify.models.partial_index`` declares them (docs/rules.md#entries). The instance settings row
is written here, at install, with a fresh 32-byte unsubscribe secret that nothing ever
rotates (docs/rules.md#one-click-unsubscribe, docs/rules.md#instance-settings).

Revision ID: 861c6e904ccc
Revises:
Create Date: 2026-12-03 09:00:00

"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = "861c6e904ccc"
down_revision = None
branch_labels = ("wikinotify",)
depends_on = None

#: Written out, not imported from wikinotify.models: a revision is a snapshot, and the
#: models will have moved on by the time a later revision runs.
HOST_ID = sa.String(64)
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)

#: Dropped in this order on downgrade.
TABLES = (
    "wikinotify_seen",
    "wikinotify_site_switches",
    "wikinotify_instance_settings",
    "wikinotify_email_schedules",
    "wikinotify_preferences",
    "wikinotify_notifications",
    "wikinotify_events",
)


def where(predicate: str) -> dict[str, Any]:
    """A partial index's predicate, for both databases."""
    return {"postgresql_where": sa.text(predicate), "sqlite_where": sa.text(predicate)}


def upgrade() -> None:
    op.create_table(
        "wikinotify_events",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("site_id", HOST_ID, nullable=True),
        sa.Column("actor_id", HOST_ID, nullable=True),
        sa.Column("page_id", HOST_ID, nullable=True),
        sa.Column("comment_id", HOST_ID, nullable=True),
        sa.Column("submission_id", HOST_ID, nullable=True),
        sa.Column("data", JSON, nullable=False),
        sa.Column("recipients", JSON, nullable=True),
        sa.Column("cursor", JSON, nullable=True),
        sa.Column("claimed_at", TIMESTAMP, nullable=True),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("processed_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("retry_after", TIMESTAMP, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("failed_at", TIMESTAMP, nullable=True),
        sa.Column("key", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wikinotify_events")),
    )
    op.create_index("uq_wikinotify_events_kind_key", "wikinotify_events", ["kind", "key"],
                    unique=True, **where("key IS NOT NULL"))
    op.create_index("ix_wikinotify_events_unprocessed", "wikinotify_events", ["created_at"],
                    **where("processed_at IS NULL AND failed_at IS NULL"))
    op.create_index("ix_wikinotify_events_failed", "wikinotify_events", ["failed_at", "id"],
                    **where("failed_at IS NOT NULL"))
    op.create_index("ix_wikinotify_events_processed", "wikinotify_events", ["processed_at"],
                    **where("processed_at IS NOT NULL"))

    op.create_table(
        "wikinotify_notifications",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("site_id", HOST_ID, nullable=True),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("variant", sa.String(32), nullable=False),
        sa.Column("variants", sa.String(255), server_default="", nullable=False),
        sa.Column("group_key", sa.String(255), nullable=False),
        sa.Column("page_id", HOST_ID, nullable=True),
        sa.Column("comment_id", HOST_ID, nullable=True),
        sa.Column("actor_id", HOST_ID, nullable=True),
        sa.Column("data", JSON, nullable=False),
        sa.Column("count", sa.Integer(), server_default="1", nullable=False),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False),
        sa.Column("in_app", sa.Boolean(), nullable=False),
        sa.Column("email_state", sa.String(16), server_default="none", nullable=False),
        sa.Column("email_after", TIMESTAMP, nullable=True),
        sa.Column("emailed_at", TIMESTAMP, nullable=True),
        sa.Column("email_attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("email_error", sa.Text(), nullable=True),
        sa.Column("email_error_class", sa.String(16), nullable=True),
        sa.Column("read_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint(
            "email_state IN ('none', 'pending', 'sending', 'sent', 'failed', 'skipped')",
            name=op.f("ck_wikinotify_notifications_email_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wikinotify_notifications")),
    )
    op.create_index("ix_wikinotify_notifications_inbox", "wikinotify_notifications",
                    ["user_id", "updated_at", "id"])
    op.create_index("ix_wikinotify_notifications_unread", "wikinotify_notifications",
                    ["user_id", "site_id", "page_id", "category"],
                    **where("read_at IS NULL AND in_app"))
    op.create_index("ix_wikinotify_notifications_email_due", "wikinotify_notifications",
                    ["email_after"], **where("email_state IN ('pending', 'sending')"))
    op.create_index("ix_wikinotify_notifications_emailed", "wikinotify_notifications",
                    ["email_state", "emailed_at", "id"],
                    **where("email_state IN ('sent', 'failed')"))
    op.create_index("ix_wikinotify_notifications_updated", "wikinotify_notifications",
                    ["updated_at", "id"])
    op.create_index("uq_wikinotify_notifications_unread_group", "wikinotify_notifications",
                    ["user_id", "group_key"], unique=True, **where("read_at IS NULL"))

    op.create_table(
        "wikinotify_preferences",
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("channel IN ('inApp', 'email')",
                           name=op.f("ck_wikinotify_preferences_channel")),
        sa.PrimaryKeyConstraint("user_id", "category", "channel",
                                name=op.f("pk_wikinotify_preferences")),
    )
    op.create_index("ix_wikinotify_preferences_enabled", "wikinotify_preferences",
                    ["category", "channel", "user_id"], **where("enabled"))

    op.create_table(
        "wikinotify_email_schedules",
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("schedule", sa.String(16), server_default="immediate", nullable=False),
        sa.Column("hour", sa.SmallInteger(), nullable=True),
        sa.Column("weekday", sa.SmallInteger(), nullable=True),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("schedule IN ('immediate', 'hourly', 'daily', 'weekly')",
                           name=op.f("ck_wikinotify_email_schedules_schedule")),
        sa.CheckConstraint("hour IS NULL OR hour BETWEEN 0 AND 23",
                           name=op.f("ck_wikinotify_email_schedules_hour")),
        sa.CheckConstraint("weekday IS NULL OR weekday BETWEEN 1 AND 7",
                           name=op.f("ck_wikinotify_email_schedules_weekday")),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_wikinotify_email_schedules")),
    )

    settings = op.create_table(
        "wikinotify_instance_settings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("retention_days", sa.Integer(), server_default="90", nullable=False),
        sa.Column("email_delay_seconds", sa.Integer(), server_default="180", nullable=False),
        sa.Column("mail_batch_size", sa.Integer(), server_default="100", nullable=False),
        sa.Column("unsubscribe_secret", sa.LargeBinary(32), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_wikinotify_instance_settings_single_row")),
        sa.CheckConstraint("mail_batch_size BETWEEN 1 AND 1000",
                           name=op.f("ck_wikinotify_instance_settings_mail_batch_size")),
        sa.CheckConstraint("retention_days >= 1",
                           name=op.f("ck_wikinotify_instance_settings_retention_days")),
        sa.CheckConstraint("email_delay_seconds >= 0",
                           name=op.f("ck_wikinotify_instance_settings_email_delay_seconds")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wikinotify_instance_settings")),
    )
    op.bulk_insert(settings, [{
        "id": 1,
        "unsubscribe_secret": secrets.token_bytes(32),
        "updated_at": datetime.now(UTC),
    }])

    op.create_table(
        "wikinotify_site_switches",
        sa.Column("site_id", HOST_ID, nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("site_id", name=op.f("pk_wikinotify_site_switches")),
    )

    op.create_table(
        "wikinotify_seen",
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("seen_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_wikinotify_seen")),
    )


def downgrade() -> None:
    # A table's indexes and constraints go with it.
    for table in TABLES:
        op.drop_table(table)
