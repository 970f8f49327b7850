"""A deleted account takes along everything wikinotify keeps of hers
(docs/rules.md#what-a-user-owns): ``forget_user`` walks ``OWNED_BY_USER``, and a table that keys its
rows by an account without joining that list fails here. SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import re

import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from demo.extensions import notify
from demo.models import db
from tests.helpers.wiki import page, user
from wikinotify import inbox, preferences
from wikinotify.inbox import feed, read_marks
from wikinotify.models import (
    OWNED_BY_USER,
    Base,
    Delivery,
    Notification,
    Preference,
    utcnow,
)
from wikinotify.outbound import endpoints, push_subscriptions, standard_webhooks
from wikinotify.preferences import mutes
from wikinotify.preferences.cadence import Schedule

#: A column named like these holds an account's id: the row is someone's. (``actor_id``,
#: a mute's ``target_id``, an event's ``recipients`` name people in other people's rows.)
ACCOUNT_WORDS = re.compile(r"(^|_)(user|users|owner|account|member|subscriber|muter)(_|$)")


def browser_key() -> str:
    """A browser's p256dh: a real P-256 point, base64url (subscribe checks the curve)."""
    point = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return base64.urlsafe_b64encode(point).rstrip(b"=").decode()


def account_id(name: str) -> str:
    return str(user(name).id)


def everything_of(me: str, other: str) -> None:
    """One row of every kind an account can have, made by the services that make them:
    an entry with its mail pending, a preference, a digest schedule, a seen time, a mute
    of a page and one of ``other``, a webhook (with its verification delivery) and a chat
    target (with a test delivery), a feed link, a browser's push subscription, a read mark."""
    session = db.session()  # the Session itself: the after-commit work hangs on it
    home = str(page("home").id)
    session.add(Preference(user_id=me, category="pageCreated", channel="inApp", enabled=True))
    preferences.save_schedule(session, me, Schedule(cadence="daily", hour=9))
    inbox.mark_seen(session, me)
    mutes.mute(session, me, "page", home)
    mutes.mute(session, me, "user", other)
    # A "mark all read" the job has not settled yet (before the entry: it stays unread).
    read_marks.place(session, me, None, utcnow())
    # After the mutes, which would cancel its mail.
    session.add(Notification(
        user_id=me, site_id=None, category="watchedPage", variant="edited",
        group_key=f"page:{home}", page_id=home, actor_id=other, data={}, last_event_id=1,
        in_app=True, email_state="pending", email_after=utcnow(),
    ))
    webhook, _ = endpoints.create_webhook(
        session, me, url="https://hooks.example/in", categories=["watchedPage"])
    chat = endpoints.create_chat(session, me, url="json://chat.example/", hint="json://…",
                                 categories=["watchedPage"])
    endpoints.send_test(session, chat, "Hello")
    feed.token_for(session, b"s" * 32, me)
    push_subscriptions.subscribe(session, me, url=f"https://fcm.googleapis.com/fcm/send/{me}",
                                 p256dh=browser_key(), auth="A" * 22, browser="Firefox",
                                 session_id=None)
    # A delivery on her endpoint that names no reader: it goes with the endpoint it
    # belongs to, not only with the reader it names.
    session.add(Delivery(endpoint_id=webhook.id, user_id=None, type="webhook.test",
                         message_id=standard_webhooks.new_message_id(), payload={}))
    session.commit()


def every_row() -> dict[str, list[str]]:
    """Every row of every wikinotify table, as text, per table."""
    db.session.expire_all()
    return {
        table.name: sorted(repr(tuple(row)) for row in db.session.execute(sa.select(table)))
        for table in Base.metadata.sorted_tables
    }


def owned_tables() -> set[str]:
    return {column.class_.__tablename__ for column in OWNED_BY_USER}


def test_forgetting_an_account_removes_every_row_of_hers_and_none_of_anyone_elses(app):
    with app.app_context():
        alice, bob = account_id("alice"), account_id("bob")
        everything_of(bob, alice)  # bob's mute of alice is his row: it stays
        endpoints.create_webhook(db.session, None, url="https://site.example/in",
                                 categories=["watchedPage"])  # the site's, not hers
        db.session.commit()
        before = every_row()
        everything_of(alice, bob)
        with_hers = every_row()
        grown = {name for name, rows in with_hers.items() if len(rows) > len(before[name])}
        assert grown >= owned_tables(), "she should have a row in every table of the list"
        assert "pending" in repr(with_hers["wikinotify_notifications"])

        notify.forget_user(alice)
        db.session.commit()

        after = every_row()
        assert {name for name, rows in after.items() if rows != before[name]} == set()


def test_forgetting_an_account_joins_the_callers_transaction(app):
    with app.app_context():
        everything_of(account_id("alice"), account_id("bob"))
        before = every_row()
        notify.forget_user(account_id("alice"))
        db.session.rollback()
        after = every_row()
        assert {name for name, rows in after.items() if rows != before[name]} == set()


def test_every_column_that_names_an_account_is_on_the_owned_list():
    listed = {(column.class_.__tablename__, column.key) for column in OWNED_BY_USER}
    for table in Base.metadata.sorted_tables:
        for column in table.columns:
            if ACCOUNT_WORDS.search(column.name):
                assert (table.name, column.name) in listed, (
                    f"{table.name}.{column.name} names an account: add it to "
                    "wikinotify.models.OWNED_BY_USER, so that forget_user removes its rows")


def test_rows_that_belong_to_an_owned_row_are_listed_before_it():
    """A foreign key into a table of the list (a delivery of her endpoint) is on the list
    too, ahead of its parent, so that forget_user deletes children first."""
    order = [column.class_.__tablename__ for column in OWNED_BY_USER]
    for table in Base.metadata.sorted_tables:
        for key in table.foreign_keys:
            parent = key.column.table.name
            if parent not in order:
                continue
            listed = [c for c in OWNED_BY_USER
                      if (c.class_.__tablename__, c.key) == (table.name, key.parent.name)]
            assert listed, f"{table.name}.{key.parent.name} (rows of {parent}) is not listed"
            assert OWNED_BY_USER.index(listed[0]) < order.index(parent), (
                f"{table.name}.{key.parent.name} must be listed before {parent}")
