"""Digests at the reader's local time (docs/rules.md#digests): the schedule in ``/api/preferences``,
the send time it gives a pending row across daylight-saving changes, the categories that stay
immediate, rescheduling on a change, the digest mail a real drain sends, and the
retention they need. Send times are computed at chosen clock times ("now" is passed in);
nothing sleeps."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.models import User, db
from tests.helpers.jobs import deliver, run_jobs
from tests.helpers.mail import bodies
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, page, set_delay, user
from wikinotify.categories import comment_reply, mention, review_requested, watched_page
from wikinotify.host import UserFacts
from wikinotify.mail import compose
from wikinotify.models import EmailSchedule, InstanceSettings, Notification, utcnow
from wikinotify.preferences.cadence import Schedule, email_after_for, next_digest, user_offset

API = "/_notifications/api/preferences"
ADMIN_API = "/_notifications/api/admin/settings"
PAGE = "/_notifications/preferences"
PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
READER = UserFacts(id="42", display_name="Reader", email="reader@example.com")
OFFSET = user_offset(READER.id)
WINDOW = InstanceSettings(email_delay_seconds=180)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def due(cadence: str, zone: str, now: datetime, **choice) -> datetime:
    return next_digest(Schedule(cadence=cadence, timezone=zone, **choice), zone, READER.id, now)


# -- the send time ---------------------------------------------------------------------------


def test_the_offset_is_fixed_per_user_inside_the_hour_and_spreads_readers():
    assert user_offset("42") == user_offset("42")
    offsets = {user_offset(str(n)) for n in range(200)}
    assert all(timedelta(0) <= o < timedelta(hours=1) for o in offsets)
    # 200 readers on the default hour land on (nearly) 200 different seconds.
    assert len(offsets) > 190


@pytest.mark.parametrize(("before", "change", "after"), [
    # Europe/Paris springs forward on the last Sunday of March: 09:00 is 08:00 UTC, then 07:00.
    (utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)),
    # ... and falls back on the last Sunday of October: 07:00 UTC, then 08:00.
    (utc(2026, 10, 24, 7), utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)),
])
def test_a_daily_paris_digest_stays_at_nine_across_the_change(before, change, after):
    times = []
    now = before - timedelta(hours=1)
    for _ in range(3):
        now = due("daily", "Europe/Paris", now, hour=9)
        times.append(now)
    assert times == [before + OFFSET, change + OFFSET, after + OFFSET]
    for sent in times:
        local = sent.astimezone(PARIS)
        assert (local.hour, local.minute, local.second) == (9, *divmod(OFFSET.seconds, 60))


@pytest.mark.parametrize(("now", "expected"), [
    # America/New_York: the second Sunday of March (8 March 2026) moves 18:00 from 23:00
    # UTC to 22:00 UTC; a Friday's weekly Monday digest is on the new clock.
    (utc(2026, 3, 6, 12), utc(2026, 3, 9, 22)),
    # The first Sunday of November (1 November 2026) moves it back to 23:00 UTC.
    (utc(2026, 10, 30, 12), utc(2026, 11, 2, 23)),
    # The change is that very Sunday, and a Monday digest a day later is on the new clock.
    (utc(2026, 3, 8, 5), utc(2026, 3, 9, 22)),
])
def test_a_weekly_new_york_digest_comes_on_its_weekday_at_its_local_hour(now, expected):
    sent = due("weekly", "America/New_York", now, hour=18, weekday=0)
    assert sent == expected + OFFSET
    assert sent.astimezone(NEW_YORK).weekday() == 0
    assert sent.astimezone(NEW_YORK).hour == 18


def test_a_weekly_digest_whose_slot_has_just_passed_waits_a_week():
    monday_evening = utc(2026, 3, 9, 22) + OFFSET
    sent = due("weekly", "America/New_York", monday_evening, hour=18, weekday=0)
    assert sent == utc(2026, 3, 16, 22) + OFFSET


def test_a_daily_new_york_digest_the_day_after_each_change():
    # 08:00 EST is 13:00 UTC; from the Monday after the spring change, 12:00 UTC.
    assert due("daily", "America/New_York", utc(2026, 3, 8, 14), hour=8) == (
        utc(2026, 3, 9, 12) + OFFSET)
    assert due("daily", "America/New_York", utc(2026, 11, 1, 14), hour=8) == (
        utc(2026, 11, 2, 13) + OFFSET)


def test_an_hour_the_spring_change_skips_goes_out_an_hour_later_that_day():
    # 02:00 does not exist in Paris on 29 March 2026: the digest leaves at 03:00 CEST.
    sent = due("daily", "Europe/Paris", utc(2026, 3, 28, 20), hour=2)
    assert sent == utc(2026, 3, 29, 1) + OFFSET
    assert sent.astimezone(PARIS).hour == 3


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/New_York", "Asia/Kolkata"])
@pytest.mark.parametrize("now", [utc(2026, 3, 29, 0, 59, 59), utc(2026, 3, 8, 6, 30),
                                 utc(2026, 11, 1, 5, 45), utc(2026, 6, 1, 12, 0)])
def test_hourly_is_the_next_local_top_of_the_hour_plus_the_offset(zone, now):
    sent = due("hourly", zone, now)
    assert now < sent <= now + timedelta(hours=1)
    local = (sent - OFFSET).astimezone(ZoneInfo(zone))
    # Kolkata is UTC+05:30: its top of the hour is at half past in UTC.
    assert (local.minute, local.second, local.microsecond) == (0, 0, 0)


@pytest.mark.parametrize("category", [mention.category, comment_reply.category,
                                      review_requested.category])
def test_what_someone_waits_on_stays_immediate_under_a_digest(category):
    now = utc(2026, 3, 28, 10)
    daily = Schedule(cadence="daily", hour=9, timezone="Europe/Paris")
    assert email_after_for(READER, now, WINDOW, category, daily) == now + timedelta(minutes=3)
    assert email_after_for(READER, now, WINDOW, watched_page.category, daily) == (
        utc(2026, 3, 29, 7) + OFFSET)


def test_the_zone_is_the_readers_then_the_accounts_then_the_sites_then_utc():
    now = utc(2026, 6, 1, 12)
    daily = Schedule(cadence="daily", hour=9)
    in_tokyo = UserFacts(id=READER.id, display_name="R", timezone="Asia/Tokyo")
    assert email_after_for(READER, now, WINDOW, watched_page.category, daily) == (
        utc(2026, 6, 2, 9) + OFFSET)
    assert email_after_for(READER, now, WINDOW, watched_page.category, daily,
                           "Europe/Paris") == utc(2026, 6, 2, 7) + OFFSET
    assert email_after_for(in_tokyo, now, WINDOW, watched_page.category, daily,
                           "Europe/Paris") == utc(2026, 6, 2, 0) + OFFSET
    chosen = Schedule(cadence="daily", hour=9, timezone="America/New_York")
    assert email_after_for(in_tokyo, now, WINDOW, watched_page.category, chosen,
                           "Europe/Paris") == utc(2026, 6, 1, 13) + OFFSET


# -- the API -------------------------------------------------------------------------------


pytestmark = [
    pytest.mark.app_config(smtp=True, WIKINOTIFY_MAIL_ENABLED=True),
    pytest.mark.mail_delay(0),
]


def current(client) -> dict:
    body = client.get(API).get_json()
    categories = {c["key"]: {"inApp": c["inApp"], "email": c["email"]} for c in body["categories"]}
    return {"categories": categories}


def put_schedule(client, schedule) -> object:
    return client.put(API, json={**current(client), "emailSchedule": schedule})


def stored_schedule(app, username: str = "alice") -> EmailSchedule | None:
    with app.app_context():
        user_id = str(db.session.scalar(sa.select(User.id).where(User.username == username)))
        return db.session.get(EmailSchedule, user_id)


@pytest.mark.parametrize(("schedule", "field"), [
    ({"cadence": "monthly"}, "emailSchedule.cadence"),
    ({"hour": 9}, "emailSchedule.cadence"),
    ({"cadence": "daily", "hour": 24}, "emailSchedule.hour"),
    ({"cadence": "daily", "hour": "9"}, "emailSchedule.hour"),
    ({"cadence": "daily", "hour": -1}, "emailSchedule.hour"),
    ({"cadence": "weekly", "weekday": 7}, "emailSchedule.weekday"),
    ({"cadence": "weekly", "weekday": 1.5}, "emailSchedule.weekday"),
    ({"cadence": "daily", "timezone": "Mars/Olympus_Mons"}, "emailSchedule.timezone"),
    ({"cadence": "daily", "timezone": "../../../etc/passwd"}, "emailSchedule.timezone"),
    ({"cadence": "daily", "timezone": 1}, "emailSchedule.timezone"),
    ({"cadence": "daily", "minute": 5}, "emailSchedule.minute"),
    ("daily", "emailSchedule"),
])
def test_a_bad_schedule_is_a_400_naming_the_field_and_stores_nothing(app, as_alice, schedule,
                                                                      field):
    response = put_schedule(as_alice, schedule)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert field in error["fields"], error
    assert stored_schedule(app) is None


def test_get_returns_what_was_put_with_the_defaults_filled(app, as_alice):
    assert as_alice.get(API).get_json()["emailSchedule"] == {
        "cadence": "immediate", "hour": 9, "weekday": 0, "timezone": "UTC"}

    response = put_schedule(as_alice, {"cadence": "weekly", "weekday": 4,
                                       "timezone": "Europe/Paris"})
    assert response.status_code == 200
    expected = {"cadence": "weekly", "hour": 9, "weekday": 4, "timezone": "Europe/Paris"}
    assert response.get_json()["emailSchedule"] == expected
    assert as_alice.get(API).get_json()["emailSchedule"] == expected
    row = stored_schedule(app)
    assert (row.schedule, row.hour, row.weekday, row.timezone) == ("weekly", 9, 4, "Europe/Paris")

    # A timezone of null follows the account's: the answer says which zone that is.
    with app.app_context():
        user("alice").timezone = "America/New_York"
        db.session.commit()
    response = put_schedule(as_alice, {"cadence": "daily", "hour": 7, "timezone": None})
    assert response.get_json()["emailSchedule"] == {
        "cadence": "daily", "hour": 7, "weekday": 4, "timezone": "America/New_York"}
    assert stored_schedule(app).timezone is None


def test_a_put_without_a_schedule_leaves_it_alone(app, as_alice):
    put_schedule(as_alice, {"cadence": "hourly"})
    assert as_alice.put(API, json=current(as_alice)).status_code == 200
    assert stored_schedule(app).schedule == "hourly"


def test_the_page_sets_a_daily_digest_without_javascript(app, as_alice):
    page_html = as_alice.get(PAGE).get_data(as_text=True)
    assert 'action="/_notifications/preferences/schedule"' in page_html
    assert '<option value="immediate" selected>' in page_html
    assert '<option value="UTC" selected>' in page_html

    response = as_alice.post(PAGE + "/schedule", data={
        "cadence": "daily", "hour": "7", "weekday": "0", "timezone": "Europe/Paris"})
    assert response.status_code == 302
    row = stored_schedule(app)
    assert (row.schedule, row.hour, row.timezone) == ("daily", 7, "Europe/Paris")
    page_html = as_alice.get(PAGE).get_data(as_text=True)
    assert '<option value="daily" selected>' in page_html
    assert '<option value="7" selected>07:00</option>' in page_html
    assert '<option value="Europe/Paris" selected>' in page_html
    assert "Your email delivery is saved." in page_html


@pytest.mark.parametrize(("field", "value"), [
    ("cadence", "fortnightly"), ("hour", "25"), ("hour", "nine"), ("weekday", "9"),
    ("timezone", "Mars/Olympus_Mons"),
])
def test_the_page_refuses_a_bad_schedule_naming_the_field(app, as_alice, field, value):
    form = {"cadence": "weekly", "hour": "7", "weekday": "0", "timezone": "UTC", field: value}
    response = as_alice.post(PAGE + "/schedule", data=form)
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    # Named by its label in the summary, which links to it, and marked beside it
    # (docs/languages.md#refusals).
    assert f'<a href="#wn-{field}">' in html.split('role="alert"')[1]
    assert re.search(rf'<select name="{field}" id="wn-{field}"[^>]*aria-invalid="true"', html)
    assert f'id="wn-{field}-error"' in html
    assert stored_schedule(app) is None


# -- the fan-out, rescheduling and the drain ---------------------------------------------------


def alice_daily_in_paris(client, hour: int = 9) -> None:
    login(client, "alice")
    response = put_schedule(client, {"cadence": "daily", "hour": hour,
                                      "timezone": "Europe/Paris"})
    assert response.status_code == 200


def by_category(name: str) -> dict[str, Notification]:
    return {e.category: e for e in entries_for(name)}


def test_the_fan_out_holds_a_digest_readers_rows_until_their_hour(ctx, client):
    alice_daily_in_paris(client)
    alice = str(user("alice").id)
    edit("handbook/onboarding", "bob", "A digest's worth")
    wiki.add_comment(page("home"), user("carol"), "@alice over to you")
    run_jobs(ctx)
    rows = by_category("alice")
    edited = rows["watchedPage"]
    assert edited.email_state == "pending"
    assert edited.email_after == next_digest(
        Schedule("daily", 9, 0, "Europe/Paris"), "Europe/Paris", alice, edited.created_at)
    assert edited.email_after.astimezone(PARIS).hour == 9
    # The mention is something Alice waits on: the short window (0 here), not the digest;
    # the drain the fan-out kicked has sent it already.
    assert rows["mention"].email_state == "sent"


def test_changing_the_schedule_reschedules_the_pending_rows(ctx, client):
    set_delay(600)  # the mention waits in its window meanwhile
    alice_daily_in_paris(client)
    edit("handbook/onboarding", "bob", "Held for the morning")
    wiki.add_comment(page("home"), user("carol"), "@alice over to you")
    run_jobs(ctx)
    rows = by_category("alice")
    assert {r.email_state for r in rows.values()} == {"pending"}
    mention_due = rows["mention"].email_after
    assert rows["watchedPage"].email_after.astimezone(PARIS).hour == 9

    before = utcnow()
    put_schedule(client, {"cadence": "hourly"})
    hourly = by_category("alice")["watchedPage"].email_after
    assert before < hourly <= before + timedelta(hours=1)
    assert hourly.astimezone(PARIS).minute * 60 + hourly.second == user_offset(
        str(user("alice").id)).seconds

    before = utcnow()
    put_schedule(client, {"cadence": "immediate"})
    rows = by_category("alice")
    assert before + timedelta(seconds=600) <= rows["watchedPage"].email_after <= (
        utcnow() + timedelta(seconds=600))
    assert rows["mention"].email_after == mention_due  # never held, never moved


def test_a_drain_sends_one_digest_grouped_by_page_newest_first(ctx, client, smtp):
    alice_daily_in_paris(client)
    # The seed has Alice watch Onboarding and the Runbook.
    edit("ops/runbook", "bob", "Runbook, first")
    edit("handbook/onboarding", "bob", "Onboarding, an edit")
    wiki.add_comment(page("handbook/onboarding"), user("bob"), "Onboarding, a comment")
    wiki.add_comment(page("home"), user("carol"), "@alice a question")
    deliver(ctx)
    # The mention went at once, alone; the digest's three rows wait for 09:00 in Paris.
    assert [m["Subject"] for m in smtp.inbox.messages] == [
        "[Main wiki] Home: 1 mention by Carol Danvers"]
    held = entries_for("alice", email_state="pending")
    assert len(held) == 3
    deliver(ctx)
    assert len(smtp.inbox.messages) == 1

    # The clock reaches the digest's time: the drain claims on the database's clock, so
    # the rows' time is brought to now rather than the clock to the rows.
    db.session.execute(
        sa.update(Notification)
        .where(Notification.id.in_([e.id for e in held]))
        .values(email_after=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()
    deliver(ctx)
    assert len(smtp.inbox.messages) == 2
    digest = smtp.inbox.messages[1]
    assert digest["Subject"] == "[Main wiki] Onboarding and 1 other page: 3 notifications"
    text, html = bodies(digest)
    onboarding = text.index("== Onboarding (handbook/onboarding) ==")
    runbook = text.index("== Runbook (ops/runbook) ==")
    # Onboarding's news is the newest, so its page comes first, and within it the
    # comment (newest) before the edit.
    assert onboarding < runbook
    assert onboarding < text.index("commented") < text.index("edited") < runbook
    assert text.count("== Onboarding (handbook/onboarding) ==") == 1
    assert html.index(">Onboarding <span") < html.index(">Runbook <span")
    assert entries_for("alice", email_state="pending") == []


def drain_at(app, clock: datetime) -> None:
    """Run a real drain as if the clock read ``clock``. The drain claims on the database's
    clock, so every waiting row is moved by (now - clock) for the run, and back after: a
    row goes out exactly when its send time is at or before ``clock``."""
    shift = utcnow() - clock
    waiting = sa.and_(Notification.email_state == "pending",
                      Notification.email_after.is_not(None))
    rows = db.session.scalars(sa.select(Notification).where(waiting)).all()
    for row in rows:
        row.email_after = row.email_after + shift
    db.session.commit()
    deliver(app)
    db.session.expire_all()
    for row in db.session.scalars(sa.select(Notification).where(waiting)).all():
        row.email_after = row.email_after - shift
    db.session.commit()


@pytest.mark.parametrize(("zone", "edited_at", "old_nine", "new_nine"), [
    # Paris springs forward on 29 March 2026: Sunday's 09:00 is 07:00 UTC, not 08:00.
    ("Europe/Paris", utc(2026, 3, 28, 21), utc(2026, 3, 29, 8), utc(2026, 3, 29, 7)),
    # New York falls back on 1 November 2026: Sunday's 09:00 is 14:00 UTC, not 13:00.
    ("America/New_York", utc(2026, 11, 1, 3), utc(2026, 11, 1, 13), utc(2026, 11, 1, 14)),
])
def test_the_drain_sends_a_daily_digest_at_nine_local_across_the_change(
    ctx, client, smtp, zone, edited_at, old_nine, new_nine
):
    """The drain, run at chosen clock times the night a zone changes its clocks: nothing
    before 09:00 local (plus the reader's offset), the digest at it, whichever UTC hour
    that is now."""
    login(client, "alice")
    chosen = put_schedule(client, {"cadence": "daily", "hour": 9, "timezone": zone})
    assert chosen.status_code == 200
    edit("ops/runbook", "bob", "An edit the evening before")
    run_jobs(ctx)
    (row,) = entries_for("alice", email_state="pending")
    alice = str(user("alice").id)
    # The send time the fan-out gives a row made at ``edited_at`` (the fan-out test pins
    # that it uses exactly this function).
    row.email_after = next_digest(Schedule("daily", 9, 0, zone), zone, alice, edited_at)
    db.session.commit()
    nine = new_nine + user_offset(alice)
    # A second before 09:00 local, and 09:00 on the old clock where that comes first
    # (New York's falls an hour early): not yet.
    for clock in sorted({old_nine + user_offset(alice), nine - timedelta(seconds=1)}):
        if clock < nine:
            drain_at(ctx, clock)
    assert smtp.inbox.messages == []
    drain_at(ctx, nine)
    (digest,) = smtp.inbox.messages
    assert digest["Subject"] == "[Main wiki] Runbook: 1 edit by Bob Builder"
    assert entries_for("alice", email_state="pending") == []


def test_a_digest_over_the_cap_says_how_many_more(ctx, client, smtp, monkeypatch):
    # The cap is 50 (docs/rules.md#the-mail-run); three entries over a cap of two say the same
    # thing.
    monkeypatch.setattr(compose, "SHOWN", 2)
    alice_daily_in_paris(client)
    edit("ops/runbook", "bob", "One")
    edit("handbook/onboarding", "bob", "Two")
    wiki.add_comment(page("handbook/onboarding"), user("bob"), "Three")
    run_jobs(ctx)
    db.session.execute(sa.update(Notification).values(email_after=utcnow()))
    db.session.commit()
    deliver(ctx)
    [digest] = smtp.inbox.messages
    assert digest["Subject"] == "[Main wiki] Onboarding and 1 other page: 3 notifications"
    text, _ = bodies(digest)
    assert "...and 1 more in your inbox" in text
    assert "== Runbook" not in text  # the oldest is the one left for the inbox


# -- retention -------------------------------------------------------------------------------


def test_retention_under_two_days_is_refused_while_anyone_has_a_digest(app, client):
    settings = {"retentionDays": 1, "emailDelaySeconds": 180, "mailBatchSize": 100}
    login(client, "admin")
    assert client.put(ADMIN_API, json=settings).status_code == 200
    assert client.put(ADMIN_API, json={**settings, "retentionDays": 90}).status_code == 200

    login(client, "alice")
    put_schedule(client, {"cadence": "weekly"})
    login(client, "admin")
    response = client.put(ADMIN_API, json=settings)
    assert response.status_code == 400
    assert "retentionDays" in response.get_json()["error"]["fields"]
    assert client.put(ADMIN_API, json={**settings, "retentionDays": 2}).status_code == 200

    login(client, "alice")
    put_schedule(client, {"cadence": "immediate"})
    login(client, "admin")
    assert client.put(ADMIN_API, json=settings).status_code == 200
