"""Webhook and chat endpoints, their deliveries, and channels as values.

``wikinotify_endpoints`` holds a user's (or the site's) Standard Webhooks receivers and
chat targets; ``wikinotify_deliveries`` one row per (event, endpoint) with its own state,
lease and attempts. The preferences table stops listing the channels it accepts, so the
next channel needs no migration (docs/rules.md#channels).

Revision ID: e5b1c7d9a3f2
Revises: c4a8f2e6d1b9
Create Date: 2026-12-01 10:50:00

"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = "e5b1c7d9a3f2"
down_revision = "c4a8f2e6d1b9"
branch_labels = None
depends_on = None

#: Written out, not imported from wikinotify.models: a revision is a snapshot.
HOST_ID = sa.String(64)
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def where(predicate: str) -> dict[str, Any]:
    """A partial index's predicate, for both databases."""
    return {"postgresql_where": sa.text(predicate), "sqlite_where": sa.text(predicate)}


def upgrade() -> None:
    # SQLite cannot drop a constraint in place; batch mode copies the table without it.
    with op.batch_alter_table("wikinotify_preferences") as batch:
        batch.drop_constraint(op.f("ck_wikinotify_preferences_channel"), type_="check")
    op.create_table(
        "wikinotify_endpoints",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("owner_id", HOST_ID, nullable=True),
        sa.Column("site_id", HOST_ID, nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("target_encrypted", sa.LargeBinary(), nullable=True),
        sa.Column("target_hint", sa.String(255), nullable=True),
        sa.Column("description", sa.String(255), server_default="", nullable=False),
        sa.Column("categories", JSON, nullable=False),
        sa.Column("secret_encrypted", sa.LargeBinary(), nullable=True),
        sa.Column("previous_secret_encrypted", sa.LargeBinary(), nullable=True),
        sa.Column("previous_secret_until", TIMESTAMP, nullable=True),
        sa.Column("state", sa.String(16), server_default="unverified", nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("challenge", sa.String(64), nullable=True),
        sa.Column("verified_at", TIMESTAMP, nullable=True),
        sa.Column("failing_since", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("kind IN ('webhook', 'chat')",
                           name=op.f("ck_wikinotify_endpoints_kind")),
        sa.CheckConstraint("state IN ('unverified', 'active', 'disabled')",
                           name=op.f("ck_wikinotify_endpoints_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wikinotify_endpoints")),
    )
    op.create_index("ix_wikinotify_endpoints_owner", "wikinotify_endpoints",
                    ["owner_id", "kind", "state"])
    op.create_table(
        "wikinotify_deliveries",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        sa.Column("endpoint_id", ROW_ID, nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("notification_id", sa.BigInteger(), nullable=True),
        sa.Column("user_id", HOST_ID, nullable=True),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("state", sa.String(16), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", TIMESTAMP, nullable=True),
        sa.Column("response_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("error_class", sa.String(16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("delivered_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'sending', 'delivered', 'failed', 'blocked', "
            "'ineligible', 'cancelled')",
            name=op.f("ck_wikinotify_deliveries_state"),
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["wikinotify_endpoints.id"], ondelete="CASCADE",
            name=op.f("fk_wikinotify_deliveries_endpoint_id_wikinotify_endpoints"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wikinotify_deliveries")),
        sa.UniqueConstraint("message_id", name="uq_wikinotify_deliveries_message_id"),
    )
    op.create_index("uq_wikinotify_deliveries_endpoint_event", "wikinotify_deliveries",
                    ["endpoint_id", "event_id"], unique=True,
                    **where("event_id IS NOT NULL"))
    op.create_index("ix_wikinotify_deliveries_due", "wikinotify_deliveries",
                    ["next_attempt_at"], **where("state IN ('pending', 'sending')"))
    op.create_index("ix_wikinotify_deliveries_endpoint", "wikinotify_deliveries",
                    ["endpoint_id", "id"])


def downgrade() -> None:
    op.drop_table("wikinotify_deliveries")
    op.drop_table("wikinotify_endpoints")
    # The channels the constraint allowed are the only ones a downgraded wikinotify knows.
    op.execute("DELETE FROM wikinotify_preferences WHERE channel NOT IN ('inApp', 'email')")
    with op.batch_alter_table("wikinotify_preferences") as batch:
        batch.create_check_constraint(op.f("ck_wikinotify_preferences_channel"),
                                      "channel IN ('inApp', 'email')")
