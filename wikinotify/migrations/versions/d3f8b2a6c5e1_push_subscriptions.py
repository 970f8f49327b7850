"""Web Push: browsers' push subscriptions, the ``push`` endpoint kind, and the VAPID key.

``wikinotify_push_subscriptions`` holds what a browser's ``PushManager.subscribe`` gave
(its public key, its sealed auth secret, the browser it was, the signed-in session that
subscribed it, whose sign-out removes it) beside the endpoint of kind
``push`` whose deliveries it receives; the instance settings keep the VAPID private key,
sealed, generated when first needed. The ``push`` channel itself is a value, not a column
(docs/rules.md#channels): the preferences need nothing.

Revision ID: d3f8b2a6c5e1
Revises: a9d4e2c7f1b3
Create Date: 2026-12-05 02:10:00

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "d3f8b2a6c5e1"
down_revision = "a9d4e2c7f1b3"
branch_labels = None
depends_on = None

#: Written out, not imported from wikinotify.models: a revision is a snapshot.
HOST_ID = sa.String(64)
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("wikinotify_endpoints") as batch:
        batch.drop_constraint(op.f("ck_wikinotify_endpoints_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_wikinotify_endpoints_kind"),
                                      "kind IN ('webhook', 'chat', 'push')")
    with op.batch_alter_table("wikinotify_instance_settings") as batch:
        batch.add_column(sa.Column("vapid_private_key_encrypted", sa.LargeBinary(),
                                   nullable=True))
    op.create_table(
        "wikinotify_push_subscriptions",
        sa.Column("endpoint_id", ROW_ID, nullable=False),
        sa.Column("user_id", HOST_ID, nullable=False),
        sa.Column("url_hash", sa.String(64), nullable=False),
        sa.Column("p256dh", sa.String(128), nullable=False),
        sa.Column("auth_encrypted", sa.LargeBinary(), nullable=False),
        sa.Column("browser", sa.String(64), server_default="", nullable=False),
        sa.Column("session_id", sa.String(64), nullable=True),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["wikinotify_endpoints.id"], ondelete="CASCADE",
            name=op.f("fk_wikinotify_push_subscriptions_endpoint_id_wikinotify_endpoints"),
        ),
        sa.PrimaryKeyConstraint("endpoint_id", name=op.f("pk_wikinotify_push_subscriptions")),
        sa.UniqueConstraint("url_hash", name="uq_wikinotify_push_subscriptions_url_hash"),
    )
    op.create_index("ix_wikinotify_push_subscriptions_user", "wikinotify_push_subscriptions",
                    ["user_id"])


def downgrade() -> None:
    op.drop_table("wikinotify_push_subscriptions")
    op.execute("DELETE FROM wikinotify_deliveries WHERE endpoint_id IN "
               "(SELECT id FROM wikinotify_endpoints WHERE kind = 'push')")
    op.execute("DELETE FROM wikinotify_endpoints WHERE kind = 'push'")
    op.execute("DELETE FROM wikinotify_preferences WHERE channel = 'push'")
    with op.batch_alter_table("wikinotify_instance_settings") as batch:
        batch.drop_column("vapid_private_key_encrypted")
    with op.batch_alter_table("wikinotify_endpoints") as batch:
        batch.drop_constraint(op.f("ck_wikinotify_endpoints_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_wikinotify_endpoints_kind"),
                                      "kind IN ('webhook', 'chat')")
