"""Mentions cannot flood a mailbox: one comment tells at most ``WIKINOTIFY_MENTION_LIMIT``
people, and nobody gets more than ``WIKINOTIFY_MAIL_HOURLY_LIMIT`` mails in an hour; what
is over waits for the hour and goes as one digest. SQLite and PostgreSQL, a real RQ
worker on a real Redis, a real SMTP server on 127.0.0.1."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.models import Group, User, db
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import entries_for, page, user
from wikinotify.models import Notification
from wikinotify.queue import enqueue

pytestmark = [
    pytest.mark.app_config(smtp=True, WIKINOTIFY_MAIL_HOURLY_LIMIT=2),
    pytest.mark.mail_delay(0),
]


def add_people(count: int) -> list[str]:
    everyone = db.session.scalar(sa.select(Group).where(Group.name == "Everyone"))
    names = [f"reader{n:02d}" for n in range(count)]
    for name in names:
        db.session.add(User(username=name, email=f"{name}@example.com", display_name=name,
                            groups=[everyone]))
    db.session.commit()
    return names


def test_one_comment_tells_at_most_twenty_of_those_it_mentions(ctx):
    assert ctx.config["WIKINOTIFY_MENTION_LIMIT"] == 20  # the default
    names = add_people(25)
    written = list(reversed(names))  # the order written is not the order of the ids
    wiki.add_comment(page("home"), user("bob"), " ".join(f"@{n}" for n in written))
    run_jobs(ctx)
    told = {name for name in names if entries_for(name, category="mention")}
    assert told == set(written[:20])


def mention_alice(n: int) -> None:
    wiki.add_comment(page("home"), user("bob"), f"@alice question {n}")
    run_jobs(current_app())


def current_app():
    from flask import current_app

    return current_app._get_current_object()


def test_mail_over_the_hourly_limit_waits_for_the_hour_and_goes_as_one_digest(ctx, smtp):
    mention_alice(1)
    mention_alice(2)
    assert len(smtp.inbox.raw) == 2
    first_sent = min(e.emailed_at for e in entries_for("alice", email_state="sent"))

    mention_alice(3)
    mention_alice(4)
    assert len(smtp.inbox.raw) == 2  # the limit is 2 an hour
    held = entries_for("alice", email_state="pending")
    assert len(held) == 2
    assert {e.email_after for e in held} == {first_sent + timedelta(hours=1)}

    # An hour on: the two held back go out together, as one digest.
    for entry in db.session.scalars(sa.select(Notification)):
        entry.emailed_at = entry.emailed_at and entry.emailed_at - timedelta(hours=1)
        entry.email_after = entry.email_after and entry.email_after - timedelta(hours=1)
    db.session.commit()
    enqueue(ctx, "send_mail")
    run_jobs(ctx)
    assert len(smtp.inbox.raw) == 3
    digest = smtp.inbox.messages[2]
    assert digest["Subject"] == "[Main wiki] Home: 2 notifications"
    text = digest.get_body(("plain",)).get_content()
    assert text.count("mentioned you on Home") == 2
    assert entries_for("alice", email_state="pending") == []
