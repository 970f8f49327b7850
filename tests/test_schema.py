"""The tables (docs/rules.md#preferences-are-stored-only-where-they-differ,
docs/rules.md#the-outbox, docs/rules.md#the-site-switch, docs/rules.md#instance-settings), on SQLite
and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from demo.models import db
from wikinotify.instance_settings import instance_settings, set_site_enabled, site_enabled
from wikinotify.models import InstanceSettings, Notification, metadata

PARTIAL_INDEXES = {
    "ix_wikinotify_events_unprocessed": "processed_at IS NULL",
    "ix_wikinotify_notifications_unread": "read_at IS NULL",
    "ix_wikinotify_notifications_email_due": "email_state",  # pending or sending
    "uq_wikinotify_notifications_unread_group": "read_at IS NULL",
    "ix_wikinotify_preferences_enabled": "enabled",
}


def index_definition(name: str) -> str:
    """The index as the database itself describes it."""
    if db.engine.dialect.name == "sqlite":
        query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
    else:
        query = (
            "SELECT indexdef FROM pg_indexes WHERE indexname = :name "
            "AND schemaname = current_schema()"
        )
    return db.session.scalar(sa.text(query), {"name": name}) or ""


def entry(**fields) -> Notification:
    now = datetime.now(UTC)
    values = dict(
        user_id="u1", site_id="s1", category="watchedPage", variant="edited",
        group_key="watchedPage:p1", data={}, last_event_id=1, in_app=True,
        created_at=now, updated_at=now,
    )
    return Notification(**{**values, **fields})


def test_every_table_is_there(app):
    with app.app_context():
        tables = set(sa.inspect(db.engine).get_table_names())
    assert set(metadata.tables) <= tables
    assert {
        "wikinotify_events",
        "wikinotify_notifications",
        "wikinotify_preferences",
        "wikinotify_email_schedules",
        "wikinotify_instance_settings",
        "wikinotify_site_switches",
    } <= tables


def test_the_partial_indexes_are_partial_on_this_database(app):
    with app.app_context():
        for name, predicate in PARTIAL_INDEXES.items():
            definition = index_definition(name)
            assert "WHERE" in definition.upper(), f"{name} is not partial: {definition!r}"
            assert predicate in definition, definition
        assert "UNIQUE" in index_definition("uq_wikinotify_notifications_unread_group").upper()


def test_one_unread_entry_per_user_and_group_key(app):
    with app.app_context():
        first = entry()
        db.session.add(first)
        db.session.commit()
        db.session.add(entry(last_event_id=2))
        with pytest.raises(sa.exc.IntegrityError):
            db.session.commit()
        db.session.rollback()
        # Another user, or another key, is another slot.
        db.session.add_all([entry(user_id="u2"), entry(group_key="watchedPage:p2")])
        db.session.commit()
        # Reading frees the slot (docs/rules.md#coalescing-is-idempotency).
        first = db.session.get(Notification, first.id)
        first.read_at = datetime.now(UTC)
        db.session.commit()
        db.session.add(entry(last_event_id=3))
        db.session.commit()
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Notification)) == 4


def test_instance_settings_have_the_spec_defaults_and_a_secret(app):
    with app.app_context():
        settings = instance_settings(db.session)
        db.session.commit()
        assert (settings.retention_days, settings.email_delay_seconds, settings.mail_batch_size) \
            == (90, 180, 100)
        assert isinstance(settings.unsubscribe_secret, bytes)
        assert len(settings.unsubscribe_secret) == 32
        secret = settings.unsubscribe_secret
        db.session.expire_all()
        assert instance_settings(db.session).unsubscribe_secret == secret
        assert "secret" not in repr(settings).lower()


@pytest.mark.parametrize("size", [0, 1001])
def test_the_database_refuses_a_mail_batch_size_outside_1_to_1000(app, size):
    with app.app_context():
        instance_settings(db.session)
        db.session.commit()
        with pytest.raises(sa.exc.IntegrityError):
            db.session.execute(sa.update(InstanceSettings).values(mail_batch_size=size))
            db.session.commit()


def test_the_site_switch_is_on_until_turned_off(app):
    with app.app_context():
        assert site_enabled(db.session, "s1") is True
        set_site_enabled(db.session, "s1", False)
        db.session.commit()
        assert site_enabled(db.session, "s1") is False
        assert site_enabled(db.session, "s2") is True
        assert site_enabled(db.session, None) is True  # instance scope ignores switches
        set_site_enabled(db.session, "s1", True)
        db.session.commit()
        assert site_enabled(db.session, "s1") is True


def test_timestamps_come_back_timezone_aware(app):
    with app.app_context():
        db.session.add(entry())
        db.session.commit()
        db.session.expire_all()
        stored = db.session.scalars(sa.select(Notification)).one()
        assert stored.created_at.tzinfo is not None
        assert abs((datetime.now(UTC) - stored.created_at).total_seconds()) < 60
