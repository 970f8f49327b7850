"""Every time in the reader's own zone and language (docs/rules.md#whose-time): the inbox's
days and times, the bell menu's, a mail's; relative for the last week; the one rule that
picks the zone. Real PostgreSQL (or SQLite), real Redis, a real worker, real SMTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.jobs import deliver, run_jobs
from tests.helpers.mail import bodies
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, user, watch
from wikinotify.models import EmailSchedule, Notification, utcnow
from wikinotify.times import BROWSER_ZONE_COOKIE

INBOX = "/_notifications/inbox"
API = "/_notifications/api/notifications"
LOS_ANGELES = "America/Los_Angeles"
#: 02:49 UTC on Thursday 12 November 2026 is 18:49 (PST) on Wednesday the 11th in Los Angeles.
AT_0249_UTC = datetime(2026, 11, 12, 2, 49, tzinfo=UTC)

pytestmark = [pytest.mark.app_config(smtp=True), pytest.mark.mail_delay(3600)]

#: (reader, her language's day heading, time, exact time with the zone named)
READERS = {
    "alice": ("Wednesday, November 11, 2026", "6:49\u202fPM",
              "November 11, 2026, 6:49:00\u202fPM PST"),
    "carol": ("mercredi 11 novembre 2026", "18:49", "11 novembre 2026, 18:49:00 -0800"),
}


def choose_zone(name: str, zone: str | None) -> None:
    """``name``'s email schedule names ``zone`` (as the preferences page saves it)."""
    db.session.merge(EmailSchedule(user_id=str(user(name).id), schedule="immediate",
                                   timezone=zone))
    db.session.commit()


def entry_at(ctx, name: str, when: datetime) -> Notification:
    """An entry of ``name``'s about Onboarding, last updated at ``when``, its mail due now."""
    edit("handbook/onboarding", "bob", f"Edit for {name}")
    run_jobs(ctx)
    [entry] = entries_for(name)
    db.session.execute(sa.update(Notification).where(Notification.id == entry.id).values(
        created_at=when, updated_at=when, email_after=utcnow() - timedelta(seconds=1)))
    db.session.commit()
    return entry


@pytest.mark.parametrize("name", ["alice", "carol"])
def test_an_entry_at_0249_utc_is_on_her_previous_day_at_her_time(ctx, smtp, client, name):
    heading, clock, exact = READERS[name]
    if name == "carol":  # alice watches Onboarding in the seed; carol (French) now too
        watch("handbook/onboarding", "carol")
    choose_zone(name, LOS_ANGELES)
    entry_at(ctx, name, AT_0249_UTC)

    login(client, name)
    html = client.get(INBOX).get_data(as_text=True)
    assert f'<h2 class="wn-day">{heading}</h2>' in html
    assert (f'<time class="wn-time" datetime="2026-11-12T02:49:00Z" title="{exact}" '
            f'tabindex="0">{clock}</time>') in html

    deliver(ctx)
    [mail] = [m for m in smtp.inbox.messages if m["To"] == f"{name}@example.com"]
    text, html = bodies(mail)
    assert exact in text and exact in html


@pytest.mark.parametrize(("name", "said"),
                         [("alice", "3 min. ago"), ("carol", "il y a 3\u00a0min")])
def test_the_last_week_is_relative_in_her_language(ctx, client, name, said):
    watch("handbook/onboarding", "carol")
    entry_at(ctx, name, utcnow() - timedelta(minutes=3, seconds=5))
    login(client, name)
    assert f">{said}</time>" in client.get(INBOX).get_data(as_text=True)
    assert client.get(API).get_json()["items"][0]["when"]["text"] == said


def test_the_bell_menu_s_time_is_said_in_her_zone_and_language(ctx, client):
    watch("handbook/onboarding", "carol")
    choose_zone("carol", LOS_ANGELES)
    entry_at(ctx, "carol", AT_0249_UTC)
    login(client, "carol")
    [item] = client.get(API).get_json()["items"]
    assert item["updatedAt"].startswith("2026-11-12T02:49:00")
    assert item["when"] == {"text": "11 nov. 2026, 18:49:00",
                            "exact": READERS["carol"][2]}


def test_her_choice_wins_over_her_browser_which_wins_over_the_site(ctx, client):
    """The one rule: her schedule's zone (else her account's in the wiki), else the
    browser's (the cookie times.js writes), else the site's, else UTC; a name zoneinfo
    does not know is passed over."""
    entry_at(ctx, "alice", AT_0249_UTC)
    login(client, "alice")

    def shown(cookie: str | None) -> str:
        if cookie is None:
            client.delete_cookie(BROWSER_ZONE_COOKIE)
        else:
            client.set_cookie(BROWSER_ZONE_COOKIE, cookie)
        html = client.get(INBOX).get_data(as_text=True)
        return html.split('class="wn-time"', 1)[1].split("</time>", 1)[0]

    assert 'data-wn-zone="UTC">2:49\u202fAM' in shown(None)  # the demo's site names none
    assert 'data-wn-zone="Asia/Tokyo">11:49\u202fAM' in shown("Asia/Tokyo")
    assert 'data-wn-zone="UTC">2:49\u202fAM' in shown("../../etc/passwd")
    choose_zone("alice", LOS_ANGELES)
    chosen = shown("Asia/Tokyo")
    assert "data-wn-zone" not in chosen and "6:49\u202fPM" in chosen


@pytest.mark.parametrize("name", ["alice", "carol"])
def test_a_digest_says_each_entry_s_time_in_her_zone_with_the_zone_named(ctx, smtp, name):
    watch("home", name)
    watch("handbook/onboarding", name)
    choose_zone(name, LOS_ANGELES)
    edit("handbook/onboarding", "bob", "An edit")
    edit("home", "bob", "Another page")
    run_jobs(ctx)
    db.session.execute(sa.update(Notification).where(
        Notification.user_id == str(user(name).id)).values(
        created_at=AT_0249_UTC, updated_at=AT_0249_UTC,
        email_after=utcnow() - timedelta(seconds=1)))
    db.session.commit()
    deliver(ctx)
    [mail] = [m for m in smtp.inbox.messages if m["To"] == f"{name}@example.com"]
    text, html = bodies(mail)
    assert text.count(READERS[name][2]) == 2 and html.count(READERS[name][2]) == 2
