"""The outbox under faults (docs/operating.md#failures-and-dead-letters): one bad event fails alone,
backs off and becomes a dead letter an administrator retries; claims run on the database's clock; an
emit with an idempotency key is written once; what admin and the purge read is served by indexes."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from demo.extensions import notify
from demo.models import AuditLog, Revision, db
from tests.helpers.database import statements_sent
from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import edit, entries_for, events, page, user
from wikinotify import admin, queue
from wikinotify.categories import FanoutContext
from wikinotify.config import DEFAULT_CONFIG
from wikinotify.inbox.retention import purge
from wikinotify.jobs.dispatch import STALE_CLAIM
from wikinotify.models import Event, Notification, utcnow
from wikinotify.pipeline import claims
from wikinotify.pipeline import events as pipeline_events
from wikinotify.state import state

POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
API = "/_notifications/api/admin/settings"
PAGE = "/_notifications/admin"
#: Longer than ``Notification.variant`` (String(32)): PostgreSQL refuses it at the upsert.
BAD_VARIANT = "v" * 40


def emit_edit(variant: str = "edited", **fields) -> int | None:
    """A ``page:edit`` of the onboarding page by bob, straight through ``notify.emit``."""
    target = page("handbook/onboarding")
    return notify.emit("page:edit", site_id=target.site_id, actor_id=user("bob").id,
                       page_id=target.id, snapshot={"title": target.title, "path": target.path},
                       variant=variant, **fields)


def dispatch(me: str = "worker", stale_after: timedelta = STALE_CLAIM):
    st = state()
    return pipeline_events.dispatch(FanoutContext(host=st.host, session=db.session),
                                    st.registry, mail_on=False, budget=60,
                                    stale_after=stale_after, me=me)


def db_now() -> datetime:
    """The database's clock, read back through the column type."""
    return db.session.scalar(sa.select(sa.cast(sa.func.now(), Event.created_at.type)))


def back_off_over() -> None:
    """Time passes: every back-off is over."""
    db.session.execute(sa.update(Event).where(Event.retry_after.is_not(None))
                       .values(retry_after=datetime.now(UTC) - timedelta(seconds=1)))
    db.session.commit()


def bad_event(ctx) -> Event:
    emit_edit(BAD_VARIANT)
    db.session.commit()
    [event] = events()
    return event


# -- 1. one bad event never stalls the outbox -----------------------------------------------


@POSTGRESQL
def test_one_bad_event_never_stalls_the_outbox(ctx):
    emit_edit(BAD_VARIANT)
    edit("handbook/onboarding", "carol", "An ordinary edit behind it")
    db.session.commit()
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.variant, entry.actor_id, entry.count) == ("edited", str(user("carol").id), 1)
    bad, good = events()
    assert good.processed_at is not None
    assert (bad.processed_at, bad.claimed_at, bad.claimed_by, bad.failed_at) == (
        None, None, None, None)
    assert bad.attempts == 1
    assert bad.error.startswith("StringDataRightTruncation: value too long")
    assert BAD_VARIANT not in bad.error and "INSERT" not in bad.error  # no statement, no values
    wait = bad.retry_after - db_now()
    assert timedelta(seconds=50) < wait <= timedelta(minutes=1)


@POSTGRESQL
def test_a_failing_event_backs_off_then_becomes_a_dead_letter(ctx):
    event_id = bad_event(ctx).id
    waits = []
    for attempt in range(1, 6):
        assert dispatch().failed == 1
        [event] = events()
        assert event.attempts == attempt and event.claimed_by is None
        if attempt < 5:
            waits.append(round((event.retry_after - db_now()).total_seconds() / 60))
            # Inside its back-off, no worker claims it.
            assert claims.claim_events(db.session, me="x", stale_after=STALE_CLAIM) == []
            back_off_over()
    assert waits == [1, 2, 4, 8]
    assert event.failed_at is not None and event.retry_after is None
    assert event.error.startswith("StringDataRightTruncation")
    # A dead letter is never claimed again, and is not counted as a backlog.
    assert claims.claim_events(db.session, me="x", stale_after=timedelta(0)) == []
    assert not claims.events_waiting(db.session, stale_after=timedelta(0))
    status = admin.status(db.session, state().host, now=datetime.now(UTC))
    assert status["outbox"]["unprocessed"] == 0
    [failed] = status["failedEvents"]
    assert (failed["id"], failed["kind"], failed["attempts"], failed["pagePath"]) == (
        event_id, "page:edit", 5, "handbook/onboarding")


def test_events_claimed_with_a_failing_one_are_still_delivered(ctx):
    """Any exception, on either database: the rest of the batch goes on."""
    edit("handbook/onboarding", "bob", "First")
    edit("handbook/onboarding", "carol", "Second")
    first, second = events()
    # A category that cannot read its event: the first one's data is not what it expects.
    db.session.execute(sa.update(Event).where(Event.id == first.id).values(data={"snapshot": 1}))
    db.session.commit()
    report = dispatch()
    assert (report.claimed, report.failed, report.finished) == (2, 1, 1)
    [entry] = entries_for("alice")
    assert entry.last_event_id == second.id
    first, _ = events()
    assert (first.attempts, first.error) == (1, "TypeError: 'int' object is not a mapping")
    assert first.retry_after > datetime.now(UTC)  # SQLite's text times compare right too


# -- the dead letters on Admin → Notifications -----------------------------------------------


def dead_letter(ctx) -> int:
    """An event given up on (its fan-out failed five times)."""
    event = bad_event(ctx)
    db.session.execute(sa.update(Event).where(Event.id == event.id).values(
        attempts=5, failed_at=datetime.now(UTC) - timedelta(minutes=3),
        error="StringDataRightTruncation: value too long for type character varying(32)"))
    db.session.commit()
    return event.id


def retry_url(event_id) -> str:
    return f"/_notifications/api/admin/events/{event_id}/retry"


def audits() -> list[tuple]:
    return [(a.action, a.details) for a in db.session.scalars(sa.select(AuditLog))]


def test_the_api_and_the_page_list_failed_events(ctx, client):
    event_id = dead_letter(ctx)
    login(client, "admin")
    [failed] = client.get(API).get_json()["status"]["failedEvents"]
    assert failed == {
        "id": event_id, "kind": "page:edit", "pageId": str(page("handbook/onboarding").id),
        "pageTitle": "Onboarding", "pagePath": "handbook/onboarding", "attempts": 5,
        "error": "StringDataRightTruncation: value too long for type character varying(32)",
        "at": failed["at"]}
    html = client.get(PAGE).get_data(as_text=True)
    assert f'data-event-id="{event_id}"' in html
    assert "value too long for type character varying(32)" in html
    assert f"/_notifications/admin/events/{event_id}/retry" in html


def test_an_administrator_retries_a_dead_letter_through_the_api(ctx, client):
    event_id = dead_letter(ctx)
    # The cause is fixed (here, the variant shortened): the retry delivers it.
    [event] = events()
    event.data = {**event.data, "variant": "edited"}
    db.session.commit()
    login(client, "admin")
    response = client.post(retry_url(event_id), json={})
    assert response.status_code == 204
    [event] = events()
    assert (event.attempts, event.failed_at, event.retry_after) == (0, None, None)
    assert event.error is None
    assert audits() == [("retryNotificationEvent", {"event": event_id})]
    run_jobs(ctx)  # the retry kicked a dispatch
    assert [e.count for e in entries_for("alice")] == [1]
    assert events()[0].processed_at is not None


def test_retry_answers_404_alike_for_anything_but_a_failed_event(ctx, client):
    edit("handbook/onboarding", "bob", "A healthy event")
    [healthy] = events()
    login(client, "admin")
    answers = [client.post(retry_url(raw), json={})
               for raw in (healthy.id, 999_999, "abc", "1_0", 2**63, -1, "0")]
    assert {r.status_code for r in answers} == {404}
    assert {r.get_data(as_text=True) for r in answers} == {answers[1].get_data(as_text=True)}
    assert answers[0].get_json()["error"]["code"] == "not_found"
    assert audits() == []
    assert events()[0].attempts == 0


def test_only_administrators_retry(ctx, client):
    event_id = dead_letter(ctx)
    assert client.post(retry_url(event_id), json={}).status_code == 401
    login(client, "alice")
    assert client.post(retry_url(event_id), json={}).status_code == 403
    assert client.post(f"/_notifications/admin/events/{event_id}/retry").status_code == 403
    assert events()[0].failed_at is not None and audits() == []


@pytest.mark.app_config(WTF_CSRF_ENABLED=True)
class TestRetryButton:
    def test_the_page_retries_with_its_token_and_refuses_without(self, app, client):
        # No app context held across the requests: each request gets its own ``g``, so
        # Flask-WTF's "token already checked" cannot leak from one into the next.
        def failed_at():
            with app.app_context():
                return events()[0].failed_at

        with app.app_context():
            event_id = dead_letter(app)
        login_with_csrf(client, "admin")
        button = f"/_notifications/admin/events/{event_id}/retry"
        refused = client.post(button)
        assert refused.status_code == 400
        assert "session has expired" in refused.get_data(as_text=True)
        assert failed_at() is not None
        token = csrf_token(client.get(PAGE).get_data(as_text=True))
        response = client.post(button, data={"csrf_token": token})
        assert response.status_code == 302 and response.headers["Location"].endswith(PAGE)
        assert failed_at() is None
        with app.app_context():
            assert audits() == [("retryNotificationEvent", {"event": event_id})]
        assert client.post(button, data={"csrf_token": token}).status_code == 404


# -- 5. claims on the database's clock -------------------------------------------------------


def test_a_worker_whose_clock_is_wrong_cannot_steal_a_fresh_claim(ctx, monkeypatch):
    edit("handbook/onboarding", "bob", "Claimed a moment ago")
    assert len(claims.claim_events(db.session, me="one", stale_after=STALE_CLAIM)) == 1
    [event] = events()
    assert abs(event.claimed_at - datetime.now(UTC)) < timedelta(seconds=5)
    # Worker two's clock runs an hour ahead: by it, the claim is long stale.
    ahead = datetime.now(UTC) + timedelta(hours=1)
    # Every wikinotify module that reads Python's clock, wherever the claim moves to.
    readers = [m for name, m in list(sys.modules.items())
               if name.startswith("wikinotify") and getattr(m, "utcnow", None) is utcnow]
    assert readers
    for module in readers:
        monkeypatch.setattr(module, "utcnow", lambda: ahead)
    assert claims.claim_events(db.session, me="two", stale_after=STALE_CLAIM) == []
    assert not claims.events_waiting(db.session, stale_after=STALE_CLAIM)
    assert events()[0].claimed_by == "one"
    # By the database's clock the claim ages, and only then is it taken over.
    db.session.execute(sa.update(Event).values(
        claimed_at=datetime.now(UTC) - STALE_CLAIM - timedelta(seconds=2)))
    db.session.commit()
    assert claims.events_waiting(db.session, stale_after=STALE_CLAIM)
    assert claims.claim_events(db.session, me="two", stale_after=STALE_CLAIM) == [event.id]


def test_a_claim_within_a_second_of_the_threshold_is_not_stale(ctx):
    """Times the database writes and times Python writes compare exactly, to the
    fraction of a second (SQLite's CURRENT_TIMESTAMP would drop it)."""
    edit("handbook/onboarding", "bob", "Claimed")
    db.session.execute(sa.update(Event).values(
        claimed_at=datetime.now(UTC) - timedelta(seconds=9.5), claimed_by="one"))
    db.session.commit()
    assert claims.claim_events(db.session, me="two", stale_after=timedelta(seconds=10)) == []
    [claimed] = claims.claim_events(db.session, me="two", stale_after=timedelta(seconds=9))
    assert events()[0].claimed_by == "two"


def test_the_stale_threshold_stays_well_above_the_job_timeout():
    assert DEFAULT_CONFIG["WIKINOTIFY_STALE_CLAIM_SECONDS"] == STALE_CLAIM.total_seconds()
    assert STALE_CLAIM.total_seconds() >= queue.JOB_TIMEOUT + 60


# -- 7. idempotent emit --------------------------------------------------------------------


def test_emitting_twice_with_one_key_gives_one_event_and_the_same_id(ctx):
    first = emit_edit(key="rev-41")
    db.session.commit()
    again = emit_edit(key="rev-41")
    db.session.commit()
    assert isinstance(first, int) and again == first
    # Within one transaction too, before anything is committed.
    other = emit_edit(key="rev-42")
    assert emit_edit(key="rev-42") == other != first
    # The key is unique per kind; no key means no deduplication.
    target = page("handbook/onboarding")
    moved = notify.emit("page:rename", site_id=target.site_id, actor_id=user("bob").id,
                        page_id=target.id, snapshot={"path": target.path}, variant="moved",
                        key="rev-41")
    unkeyed = [emit_edit(), emit_edit()]
    db.session.commit()
    assert moved not in (first, other) and unkeyed[0] != unkeyed[1]
    assert [(e.kind, e.key) for e in events()] == [
        ("page:edit", "rev-41"), ("page:edit", "rev-42"), ("page:rename", "rev-41"),
        ("page:edit", None), ("page:edit", None)]


def test_a_repeated_key_keeps_the_callers_transaction(ctx):
    """The conflict is no error: on PostgreSQL the host's own write still commits."""
    emit_edit(key="rev-7")
    db.session.commit()
    target = page("handbook/onboarding")
    target.content = "Written beside a repeated emit"
    emit_edit(key="rev-7")
    db.session.commit()
    db.session.expire_all()
    assert page("handbook/onboarding").content == "Written beside a repeated emit"
    assert len(events()) == 1


def test_a_retried_edit_request_notifies_once(ctx, client):
    login(client, "bob")
    form = {"title": "Onboarding", "content": "Saved once, posted twice"}
    for _ in range(2):
        assert client.post("/pages/handbook/onboarding/edit", data=form).status_code == 302
    revision = db.session.scalar(sa.select(sa.func.max(Revision.id)))
    [event] = events()
    assert event.key == str(revision)
    run_jobs(ctx)
    assert [e.count for e in entries_for("alice")] == [1]


def test_the_demo_keys_its_emits_by_revision_and_comment(ctx):
    """The same save's emit again (a retried request that reaches it a second time)
    writes nothing and answers the first event's id: the host's key is the revision."""
    from demo import wiki

    saved = edit("handbook/onboarding", "bob", "Keyed by its revision")
    revision = saved.revisions[-1]
    comment = wiki.add_comment(saved, user("carol"), "Keyed by its comment")
    edit_event, comment_event = events()
    assert (edit_event.kind, edit_event.key) == ("page:edit", str(revision.id))
    assert (comment_event.kind, comment_event.key) == ("comment:new", str(comment.id))
    assert emit_edit(key=revision.id) == edit_event.id
    db.session.commit()
    assert len(events()) == 2


# -- 8. indexes for what admin and the purge read -------------------------------------------

#: Which index serves each statement admin's status and the purge send to the two big
#: tables, recognised by a piece of its SQL.
INDEX_FOR = [
    # The entries' ids rise with time: the purge bisects the primary key for its bound
    # and walks it (wikinotify.inbox.retention.written_before).
    ("DELETE FROM wikinotify_notifications", "pk_wikinotify_notifications"),
    ("min(wikinotify_notifications.id)", "pk_wikinotify_notifications"),
    ("SELECT wikinotify_notifications.created_at", "pk_wikinotify_notifications"),
    ("DELETE FROM wikinotify_events", "ix_wikinotify_events_processed"),
    ("wikinotify_notifications.emailed_at", "ix_wikinotify_notifications_emailed"),
    ("email_state IN", "ix_wikinotify_notifications_email_due"),
    ("wikinotify_events.failed_at IS NOT NULL", "ix_wikinotify_events_failed"),
    ("wikinotify_events.processed_at IS NULL", "ix_wikinotify_events_unprocessed"),
]


def statements_of(work) -> list[tuple[str, object]]:
    """The statements ``work()`` sends that read the notifications or the events."""
    with statements_sent(db.engine) as seen:
        work()
    return [(statement, parameters) for statement, parameters in seen
            if "wikinotify_notifications" in statement or "wikinotify_events" in statement]


@POSTGRESQL
def test_what_admin_and_the_purge_read_is_served_by_indexes(ctx):
    now = datetime.now(UTC)
    statements = statements_of(lambda: admin.status(db.session, state().host, now=now))
    statements += statements_of(lambda: purge(db.session, now=now, retention_days=90))
    assert len(statements) >= 9
    with db.engine.connect() as conn:
        # The tables are tiny here, so a scan would win; forbidding it shows an index can
        # serve each statement (a statement no index serves is still a Seq Scan).
        conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, parameters in statements:
            plan = "\n".join(row[0] for row in conn.exec_driver_sql(
                "EXPLAIN " + statement, parameters))
            assert "Seq Scan" not in plan, f"{statement}\n{plan}"
            [index] = [index for piece, index in INDEX_FOR if piece in statement][:1]
            assert index in plan, f"{statement}\n{plan}"
        conn.rollback()


def test_the_purge_deletes_in_batches_walking_the_primary_key(ctx):
    now = datetime.now(UTC)
    db.session.add_all([
        Notification(user_id="1", site_id="1", category="watchedPage", variant="edited",
                     group_key=f"k{n}", data={}, last_event_id=n, in_app=True,
                     created_at=now - timedelta(days=400), updated_at=now - timedelta(days=91 + n))
        for n in range(12)
    ])
    db.session.commit()
    statements = statements_of(
        lambda: purge(db.session, now=now, retention_days=90, batch=5))
    entries = [s for s, _ in statements if "wikinotify_notifications" in s]
    deletes = [s for s in entries if s.startswith("DELETE")]
    # 5 + 5 + 2: each batch one DELETE walking the primary key, no ids read first; before
    # them its bound, the key's two ends and a bisection between them (4 probes for 12).
    assert len(deletes) == 3
    assert all("ORDER BY" in s and "LIMIT" in s for s in deletes)
    assert len(entries) - len(deletes) <= 1 + 4
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Notification)) == 0
