"""Retention (docs/rules.md#retention), run by a real worker as the daily cron runs it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from demo.models import db
from tests.helpers.jobs import run_jobs
from wikinotify.instance_settings import instance_settings
from wikinotify.models import Event, Notification
from wikinotify.queue import enqueue


def entry(n: int, updated_at: datetime, **columns) -> Notification:
    return Notification(user_id="1", site_id="1", category="watchedPage", variant="edited",
                        variants=",edited,", group_key=f"k{n}", data={}, last_event_id=n,
                        in_app=True, created_at=updated_at - timedelta(days=400),
                        updated_at=updated_at, **columns)


def test_purge_keeps_busy_entries_and_fresh_events(ctx):
    now = datetime.now(UTC)
    instance_settings(db.session).retention_days = 30
    db.session.add_all([
        # Created long ago but updated last week: a busy entry, kept
        # (docs/rules.md#lessons-learned).
        entry(1, now - timedelta(days=7)),
        entry(2, now - timedelta(days=31), read_at=now - timedelta(days=31)),
        entry(3, now - timedelta(days=45)),  # unread, but past retention all the same
        Event(kind="page:edit", origin="user", data={}, created_at=now,
              processed_at=now - timedelta(hours=2)),
        Event(kind="page:edit", origin="user", data={}, created_at=now,
              processed_at=now - timedelta(days=2)),
        Event(kind="page:edit", origin="user", data={}, created_at=now - timedelta(days=3)),
    ])
    db.session.commit()
    enqueue(ctx, "purge")
    run_jobs(ctx)
    db.session.expire_all()
    assert [e.last_event_id for e in db.session.scalars(sa.select(Notification))] == [1]
    kept = db.session.scalars(sa.select(Event).order_by(Event.id)).all()
    assert [(e.processed_at is None) for e in kept] == [False, True]  # unprocessed stays


def test_purge_works_in_batches(ctx):
    from wikinotify.inbox.retention import purge

    old = datetime.now(UTC) - timedelta(days=200)
    db.session.add_all([entry(n, old) for n in range(25)])
    db.session.commit()
    assert purge(db.session, now=datetime.now(UTC), retention_days=90, batch=10) == {
        "entries": 25, "events": 0}
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Notification)) == 0


def test_an_entry_whose_mail_still_waits_is_kept_until_it_is_mailed(ctx):
    """Retention may be as short as 2 days while a weekly digest holds a row for up to 7:
    the digest must still carry it, so a row whose mail waits outlives retention."""
    from wikinotify.inbox.retention import purge

    now = datetime.now(UTC)
    old = now - timedelta(days=5)
    db.session.add_all([
        entry(1, old, email_state="pending", email_after=now + timedelta(days=2)),
        entry(2, old, email_state="sending", email_after=now + timedelta(minutes=5)),
        entry(3, old, email_state="sent", emailed_at=old),
        entry(4, old, email_state="skipped"),
        entry(5, old),
    ])
    db.session.commit()
    assert purge(db.session, now=now, retention_days=2)["entries"] == 3
    db.session.expire_all()
    kept = db.session.scalars(sa.select(Notification.last_event_id).order_by(Notification.id))
    assert kept.all() == [1, 2]


def test_the_purge_goes_on_past_the_entries_it_keeps_batch_after_batch(ctx):
    """Each batch walks the primary key on from the last one's largest id: busy entries
    and waiting mail among the old ones are passed over, not a reason to stop."""
    from wikinotify.inbox.retention import purge

    now = datetime.now(UTC)
    old = now - timedelta(days=200)
    kept = {2, 7, 11}
    db.session.add_all([
        entry(n, now - timedelta(days=1) if n == 2 else old,
              **({"email_state": "pending", "email_after": now} if n in (7, 11) else {}))
        for n in range(14)])
    db.session.commit()
    assert purge(db.session, now=now, retention_days=90, batch=3)["entries"] == 11
    db.session.expire_all()
    assert set(db.session.scalars(sa.select(Notification.last_event_id))) == kept


def test_written_before_bisects_the_entries_by_the_time_they_were_written(ctx):
    from wikinotify.inbox.retention import written_before

    start = datetime.now(UTC) - timedelta(days=10)
    assert written_before(db.session, start) == 0  # no entries
    rows = [entry(n, start) for n in range(9)]
    for n, row in enumerate(rows):
        row.created_at = start + timedelta(days=n)
    db.session.add_all(rows)
    db.session.commit()
    ids = [row.id for row in rows]
    assert written_before(db.session, start - timedelta(days=1)) == ids[0]
    assert written_before(db.session, start + timedelta(days=4)) == ids[4]
    assert written_before(db.session, start + timedelta(days=4, hours=1)) == ids[5]
    assert written_before(db.session, start + timedelta(days=30)) == ids[-1] + 1
