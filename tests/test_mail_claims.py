"""How a mail run claims and marks its mail (wikinotify/mail/drain.py): a few readers'
rows in one claim, each named in the SQL; the ``sent`` mark written before the next mail
goes, by the sending thread on PostgreSQL and by the run when that thread could not.
Real SMTP on 127.0.0.1; SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import all_entries, mail_due_for_readers
from wikinotify import queue
from wikinotify.mail import claim
from wikinotify.models import Notification

pytestmark = [pytest.mark.app_config(smtp=True), pytest.mark.mail_delay(0)]


def test_a_claim_takes_the_rows_of_the_readers_it_names_and_no_others(ctx):
    mail_due_for_readers(5)
    pairs = claim.due_pairs(db.session, 10)
    assert len(pairs) == 5
    claimed = claim.claim(db.session, pairs[:3], timedelta(minutes=5))
    db.session.commit()
    assert list(claimed) == pairs[:3]
    assert all(len(rows) == 1 and (rows[0].user_id, rows[0].site_id) == pair
               for pair, rows in claimed.items())
    states = dict(db.session.execute(
        sa.select(Notification.user_id, Notification.email_state)).all())
    assert [states[user_id] for user_id, _ in pairs] == ["sending"] * 3 + ["pending"] * 2
    # Another run that picked the same readers gets none of their rows.
    assert claim.claim(db.session, pairs[:3], timedelta(minutes=5)) == {
        pair: [] for pair in pairs[:3]}


def test_a_claim_takes_no_more_readers_than_their_lease_can_cover():
    """Each of a claim's mails could wait twice the relay's timeout before it goes: a lease
    too short for that (shorter than RQ's job timeout) claims one reader at a time."""
    assert claim.ahead(timedelta(seconds=900), 30) == claim.AHEAD
    assert claim.ahead(timedelta(seconds=300), 30) == 5
    assert claim.ahead(timedelta(seconds=2), 30) == 1


def test_a_run_sends_each_reader_one_mail_across_several_claims(ctx, smtp):
    addresses = mail_due_for_readers(2 * claim.AHEAD + 3)
    queue.enqueue(ctx, "send_mail")
    run_jobs(ctx)
    assert Counter(smtp.inbox.recipients) == Counter(addresses)
    assert {e.email_state for e in all_entries()} == {"sent"}


def test_a_mark_the_sending_thread_could_not_write_is_written_by_the_run(
        ctx, smtp, monkeypatch):
    """The sending thread's connection fails (PostgreSQL; SQLite's run marks every mail
    itself): the run marks that mail before the next goes, and nothing is sent twice."""
    failures = []

    def fails_once(self, entries, now):
        if not failures:
            failures.append([e.id for e in entries])
            raise sa.exc.OperationalError("UPDATE", {}, Exception("connection lost"))
        return real(self, entries, now)

    real = claim.SentMarks.__call__
    monkeypatch.setattr(claim.SentMarks, "__call__", fails_once)
    addresses = mail_due_for_readers(4)
    queue.enqueue(ctx, "send_mail")
    run_jobs(ctx)
    assert Counter(smtp.inbox.recipients) == Counter(addresses)
    assert {e.email_state for e in all_entries()} == {"sent"}
    if db.engine.dialect.name == "postgresql":
        assert len(failures) == 1
