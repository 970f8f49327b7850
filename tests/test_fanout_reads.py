"""What a fan-out of many batches reads once for its run rather than per batch: who muted the
page or the actor, the category's stored preferences, the active endpoints, the email
schedules (wikinotify.pipeline.audience.read_for_run). Every test runs on SQLite and on
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.database import statements_sent
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import add_users, add_watches, emit_edit, page, user
from wikinotify.categories import FanoutContext
from wikinotify.models import Delivery, EmailSchedule, Endpoint, Event, Mute, Preference
from wikinotify.pipeline import audience, rows
from wikinotify.pipeline.run import start
from wikinotify.state import state

pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)

BATCH = 10
#: The tables the run reads once.
TABLES = ("wikinotify_mutes", "wikinotify_preferences", "wikinotify_endpoints",
          "wikinotify_email_schedules")


def populate() -> tuple[list[str], int]:
    """Four batches of watchers of a page, some of whom muted it or its editor, stored
    preferences, own endpoints (active or not, taking the category or not) or a schedule,
    and Bob's edit of it; the watchers and the event."""
    target = page("handbook/onboarding")
    r = add_users(4 * BATCH)
    add_watches(target, r)
    bob, other = str(user("bob").id), str(page("home").id)
    db.session.add_all([
        Mute(user_id=r[1], kind="page", target_id=str(target.id)),
        Mute(user_id=r[12], kind="user", target_id=bob),
        Mute(user_id=r[22], kind="page", target_id=other),  # another page: told
        Mute(user_id=r[23], kind="user", target_id=str(user("alice").id)),  # not the actor
        Preference(user_id=r[4], category="watchedPage", channel="inApp", enabled=False),
        Preference(user_id=r[4], category="watchedPage", channel="email", enabled=False),
        Preference(user_id=r[15], category="watchedPage", channel="email", enabled=False),
        Preference(user_id=r[25], category="watchedPage", channel="webhook", enabled=False),
        Preference(user_id=r[26], category="pageCreated", channel="inApp", enabled=False),
        EmailSchedule(user_id=r[10], schedule="daily", hour=7, timezone="Europe/Paris"),
        EmailSchedule(user_id=r[31], schedule="weekly", hour=18, weekday=4),
        EmailSchedule(user_id=r[32], schedule="immediate"),
    ])
    for owner, kind, state_, categories in [
        (r[7], "webhook", "active", ["watchedPage"]),
        (r[25], "webhook", "active", ["watchedPage"]),  # turned off in her preferences
        (r[17], "webhook", "active", ["pageCreated"]),  # another category
        (r[27], "webhook", "disabled", ["watchedPage"]),
        (r[28], "chat", "unverified", ["watchedPage"]),
        (r[33], "push", "active", []),
        (r[33], "webhook", "active", ["watchedPage"]),
    ]:
        db.session.add(Endpoint(kind=kind, owner_id=owner, state=state_, categories=categories,
                                url="https://example.com/hook" if kind == "webhook" else None))
    db.session.commit()
    event_id = emit_edit(target, bob)
    db.session.commit()
    return r, event_id


def decided(run, batches) -> list:
    """Each batch's recipients, their channels and endpoints, and the rows of its entry."""
    category = state().registry["watchedPage"]
    found = []
    for batch in batches:
        chosen = audience.decide(run, category, batch)
        shared, people = rows.entry_rows(run, category, chosen)
        found.append(([(c.facts.id, c.channels, sorted(c.endpoints)) for c in chosen],
                      shared, people))
    return found


def test_what_a_run_reads_once_decides_as_each_batch_reading_it(ctx, monkeypatch):
    now = datetime(2026, 12, 6, 4, 30, tzinfo=UTC)
    monkeypatch.setattr(rows, "utcnow", lambda: now)  # every run's rows made at one time
    readers, event_id = populate()
    batches = [readers[n:n + BATCH] for n in range(0, len(readers), BATCH)]
    event = db.session.get(Event, event_id)
    category = state().registry["watchedPage"]

    def run():
        return start(FanoutContext(state().host, db.session), event, mail_on=True)

    per_batch = decided(run(), batches)
    assert any(endpoints for chosen, *_ in per_batch for *_, endpoints in chosen)
    once = run()
    audience.read_for_run(once, category)
    assert all(kept is not None for kept in once.kept.values()) and len(once.kept) == 4
    with statements_sent(db.engine) as statements:
        assert decided(once, batches) == per_batch
    assert not [s for s, _ in statements if any(table in s for table in TABLES)]
    # With a cap of three rows, the endpoints (five active) and the category's preferences
    # (four rows) are read per batch; the mutes of this page and of Bob (two rows) and
    # the schedules (three) once.
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", 3)
    capped = run()
    audience.read_for_run(capped, category)
    assert [name for name, kept in capped.kept.items() if kept is not None] == [
        "muters", "schedules"]
    assert decided(capped, batches) == per_batch


def test_an_event_of_one_batch_reads_per_batch_and_one_of_many_once(ctx, monkeypatch):
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", BATCH)
    populate()
    with statements_sent(db.engine) as statements:
        run_jobs(ctx)
    mutes_read = [s for s, _ in statements if "FROM wikinotify_mutes" in s]
    # Once for the page, once for Bob: not once per batch (10, 20, 11 candidates).
    assert len(mutes_read) == 2 and "json" not in mutes_read[0].lower()
    target = page("home")
    add_watches(target, add_users(3))
    emit_edit(target, str(user("bob").id))
    db.session.commit()
    with statements_sent(db.engine) as statements:
        run_jobs(ctx)
    mutes_read = [s for s, _ in statements if "FROM wikinotify_mutes" in s]
    assert len(mutes_read) == 1 and "json" in mutes_read[0].lower()


def test_an_endpoint_deleted_or_turned_off_after_the_run_read_them_gets_no_delivery(
    ctx, monkeypatch
):
    """The run reads the endpoints once, at its first batch; one deleted and one turned
    off before the later batches are written get no delivery there, and the fan-out goes
    on: a delivery is written only to an endpoint still active in the batch's own
    transaction (docs/rules.md#candidates-in-batches)."""
    monkeypatch.setattr(audience, "CANDIDATE_BATCH", BATCH)
    target = page("handbook/onboarding")
    r = add_users(4 * BATCH)
    add_watches(target, r)
    endpoints = {name: Endpoint(kind="webhook", owner_id=owner, state="active",
                                categories=["watchedPage"], url="https://example.com/hook")
                 for name, owner in (("gone", r[25]), ("off", r[26]), ("kept", r[27]))}
    db.session.add_all(endpoints.values())
    db.session.commit()
    ids = {name: endpoint.id for name, endpoint in endpoints.items()}
    decide, batches = audience.decide, []

    def changed_elsewhere_after_the_first_batch(run, category, candidates):
        batches.append(run.kept.get(f"{audience.ENDPOINTS}:{category.key}"))
        if len(batches) == 2:  # her API calls, committed while the fan-out goes on
            with db.engine.begin() as connection:
                connection.execute(sa.delete(Endpoint).where(Endpoint.id == ids["gone"]))
                connection.execute(sa.update(Endpoint).where(Endpoint.id == ids["off"])
                                   .values(state="disabled"))
        return decide(run, category, candidates)

    monkeypatch.setattr(audience, "decide", changed_elsewhere_after_the_first_batch)
    event_id = emit_edit(target, str(user("bob").id))
    db.session.commit()
    run_jobs(ctx)
    db.session.expire_all()
    event = db.session.get(Event, event_id)
    assert event.processed_at is not None and event.attempts == 0, event.error
    assert set(db.session.scalars(sa.select(Delivery.endpoint_id))) == {ids["kept"]}
    assert batches[1] is not None, "the endpoints were read once for the run"
