"""Notification mail (docs/rules.md#mail): real RQ workers, a real Redis and a
real SMTP server on 127.0.0.1, on SQLite and PostgreSQL."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.models import AuditLog, Site, db
from tests.helpers.jobs import deliver, run_jobs
from tests.helpers.mail import bodies
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, main_site, page, prefer, set_delay, user, watch
from wikinotify import jobs
from wikinotify.instance_settings import instance_settings, set_site_enabled
from wikinotify.mail import drain
from wikinotify.models import Notification
from wikinotify.state import state

ONE_CLICK = {"List-Unsubscribe": "One-Click"}


pytestmark = [
    pytest.mark.app_config(smtp=True),
    pytest.mark.mail_delay(0),
]


def unsubscribe_url(message) -> str:
    return message["List-Unsubscribe"].split(",")[0].strip().strip("<>")


def recorded(method, calls: list):
    """``method``, which now also keeps the arguments of each call in ``calls``."""
    def wrapper(*args, **kwargs):
        calls.append(args)
        return method(*args, **kwargs)
    return wrapper


def site_relative(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


# -- cadence --------------------------------------------------------------------------------


def test_the_runbook_example_two_mails_and_an_entry_edited_twelve_times(ctx, smtp, client):
    """docs/rules.md#mail-cadence: Bob saves a page Alice watches twelve times, Carol mentions Alice
    in between: two mails, the edit (once) and the mention, and quiet until read."""
    set_delay(2)
    for n in range(3):
        edit("handbook/onboarding", "bob", f"Save {n}")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert entry.email_after - entry.created_at == timedelta(seconds=2)
    assert smtp.inbox.raw == []  # inside the window: nothing yet

    time.sleep(2.2)
    deliver(ctx)
    assert len(smtp.inbox.raw) == 1
    assert smtp.inbox.messages[0]["Subject"] == (
        "[Main wiki] Onboarding: 3 edits by Bob Builder")

    wiki.add_comment(page("home"), user("carol"), "@alice can you look at this?")
    for n in range(3, 12):
        edit("handbook/onboarding", "bob", f"Save {n}")
    run_jobs(ctx)
    time.sleep(2.2)
    deliver(ctx)
    assert len(smtp.inbox.raw) == 2
    second = smtp.inbox.messages[1]
    assert second["Subject"] == "[Main wiki] Home: 1 mention by Carol Danvers"

    edited = entries_for("alice", category="watchedPage")[0]
    assert (edited.count, edited.email_state) == (12, "sent")
    login(client, "alice")
    [item, _] = sorted(client.get("/_notifications/api/notifications").get_json()["items"],
                       key=lambda i: i["category"] != "watchedPage")
    assert item["text"] == "Onboarding was edited 12 times, last by Bob Builder"


def test_a_coalesce_while_pending_joins_the_mail_already_due(ctx, smtp):
    set_delay(60)
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    [first] = entries_for("alice")
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    [second] = entries_for("alice")
    assert (second.count, second.email_state, second.email_after) == (
        2, "pending", first.email_after)


def test_reading_frees_the_slot_so_the_next_event_mails_again(ctx, smtp, client):
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    assert len(smtp.inbox.raw) == 1
    [entry] = entries_for("alice")
    entry.read_at = datetime.now(UTC)
    db.session.commit()
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    assert len(smtp.inbox.raw) == 2


# -- one mail per (user, site) ----------------------------------------------------------------


def test_one_mail_per_user_and_site_as_a_digest(ctx, smtp):
    watch("home", "alice")
    edit("handbook/onboarding", "bob", "An edit")
    edit("home", "bob", "Another page")
    wiki.add_comment(page("home"), user("carol"), "Hello @alice")
    run_jobs(ctx)
    assert len(smtp.inbox.raw) == 1
    message = smtp.inbox.messages[0]
    assert message["Subject"] == "[Main wiki] Home and 1 other page: 3 notifications"
    text, html = bodies(message)
    for line in ("Onboarding was edited by Bob Builder", "Home was edited by Bob Builder",
                 "Carol Danvers mentioned you on Home", "Mentions", "Pages you watch"):
        assert line in text and line in html
    assert {e.email_state for e in entries_for("alice")} == {"sent"}


def test_a_run_asks_the_wiki_about_a_page_once_and_about_access_once_per_group_set(
    ctx, smtp, monkeypatch
):
    for reader in ("alice", "carol", "admin"):  # Everyone+Ops; Everyone+Reviewers twice
        watch("home", reader)
    edit("home", "bob", "An edit")
    jobs.dispatch()  # the fan-out, here: only the mail run's questions are counted
    host = state(ctx).host
    asked: dict[str, list] = {"pages": [], "held_permissions": []}
    for name, calls in asked.items():
        monkeypatch.setattr(host, name, recorded(getattr(host, name), calls))
    jobs.send_mail()
    assert sorted(smtp.inbox.recipients) == [
        "admin@example.com", "alice@example.com", "carol@example.com"]
    assert len(asked["pages"]) == 1
    # Access is still checked at send time: once for each group set, not each mail.
    assert sorted(len(groups) for groups, _, _ in asked["held_permissions"]) == [2, 2]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_run_s_connection_goes_back_to_the_pool_waiting_for_the_disk_again(ctx, smtp):
    watch("home", "alice")
    edit("home", "bob", "An edit")
    jobs.dispatch()
    engine = db.engine
    engine.dispose()  # one connection in the pool: the run's, afterwards
    interval = sys.getswitchinterval()
    jobs.send_mail()
    assert sys.getswitchinterval() == interval  # the sending thread's, for the run only
    assert smtp.inbox.recipients == ["alice@example.com"]
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
        # The run's statements were each a transaction of their own; no longer.
        assert connection.connection.dbapi_connection.autocommit is False
    assert engine.pool.checkedout() == 0


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_claim_on_the_run_s_own_connection_answers_what_the_session_would(ctx):
    """On PostgreSQL a run sends its claim on the connection it holds, not through the
    session: the same rows, column for column, value for value and type for type."""
    from tests.helpers.wiki import mail_due_for_readers
    from wikinotify.mail import claim
    from wikinotify.mail.held import HeldConnection

    mail_due_for_readers(1)
    session = state(ctx).db.session()
    [(user_id, site_id)] = claim.due_pairs(session, 10)
    session.commit()
    claimed = []
    for direct in (True, False):
        held = HeldConnection(session, postgresql=True)
        try:
            assert held.autocommit
            rows = claim.claim(session, user_id, site_id, timedelta(minutes=5),
                               held=held if direct else None)
            session.commit()
        finally:
            held.close()
        claimed.append([{name: value for name, value in row._mapping.items()
                         if name != "email_after"} for row in rows])
        [row] = rows
        assert row.email_state == "sending"
        claim.mark(session, [row.id], email_state="pending",
                   email_after=datetime.now(UTC) - timedelta(seconds=1))
        session.commit()
    assert claimed[0] == claimed[1]
    assert [[type(v) for v in row.values()] for row in claimed[0]] == [
        [type(v) for v in row.values()] for row in claimed[1]]


def test_a_user_active_on_two_sites_gets_one_mail_from_each(ctx, smtp):
    docs = db.session.scalar(sa.select(Site).where(Site.hostname == "docs.localhost"))
    wiki.save_page(docs, user("admin"), "guide", "Guide", "v1")
    watch_docs = page("guide", docs)
    from demo.models import Watch

    db.session.add(Watch(page_id=watch_docs.id, user_id=user("alice").id, site_id=docs.id))
    db.session.commit()
    edit("handbook/onboarding", "bob", "Main")
    wiki.save_page(docs, user("bob"), "guide", "Guide", "v2")
    run_jobs(ctx)
    subjects = sorted(m["Subject"] for m in smtp.inbox.messages)
    assert subjects == ["[Docs] Guide: 1 edit by Bob Builder",
                        "[Main wiki] Onboarding: 1 edit by Bob Builder"]
    docs_mail = next(m for m in smtp.inbox.messages if m["Subject"].startswith("[Docs]"))
    assert "http://docs.localhost:5000/pages/guide" in bodies(docs_mail)[0]
    assert unsubscribe_url(docs_mail).startswith("http://docs.localhost:5000/_notifications/")


def test_a_digest_shows_fifty_and_says_how_many_more(ctx, smtp):
    alice = str(user("alice").id)
    site = str(main_site().id)
    now = datetime.now(UTC)
    db.session.execute(sa.insert(Notification), [
        {"user_id": alice, "site_id": site, "category": "watchedPage", "variant": "edited",
         "variants": ",edited,", "group_key": f"watchedPage:x{n}", "page_id": None,
         "data": {"title": f"Page {n}", "path": f"p{n}", "actor_name": "Bob"},
         "count": 1, "last_event_id": n, "in_app": True, "email_state": "pending",
         "email_after": now - timedelta(seconds=1), "created_at": now, "updated_at": now}
        for n in range(60)
    ])
    db.session.commit()
    deliver(ctx)
    [message] = smtp.inbox.messages
    text, html = bodies(message)
    assert text.count("Page ") == 50
    assert "...and 10 more in your inbox" in text and "...and 10 more in your inbox" in html
    assert "http://localhost:5000/_notifications/inbox" in text
    assert message["Subject"] == "[Main wiki] 60 notifications"
    assert {e.email_state for e in entries_for("alice")} == {"sent"}


# -- what a mail is ---------------------------------------------------------------------------


def test_every_mail_has_both_bodies_the_rfc_8058_headers_and_no_page_content(ctx, smtp):
    edit("handbook/onboarding", "bob", "TOP SECRET PAGE CONTENT")
    run_jobs(ctx)
    [message] = smtp.inbox.messages
    assert message["To"] == "alice@example.com"
    assert message["Auto-Submitted"] == "auto-generated"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    url = unsubscribe_url(message)
    assert url.startswith("http://localhost:5000/_notifications/unsubscribe?t=")
    # On the wire too, not only after a lenient parser decoded it: <URL>, unencoded.
    assert f"List-Unsubscribe: <{url}>".encode() in smtp.inbox.raw[0]
    text, html = bodies(message)
    for body in (text, html):
        assert "TOP SECRET" not in body
        assert "Onboarding was edited by Bob Builder" in body
        assert "http://localhost:5000/pages/handbook/onboarding" in body
        assert "http://localhost:5000/_notifications/preferences" in body
        assert url.replace("&", "&amp;") in body or url in body


def test_a_mail_names_the_page_by_its_path_as_well_as_its_title(ctx, smtp):
    """docs/rules.md#what-a-mail-says: the path as text beside the title, in both bodies of
    a notification and of a digest (each page's heading)."""
    edit("handbook/onboarding", "bob", "An edit")
    run_jobs(ctx)
    text, html = bodies(smtp.inbox.messages[0])
    assert "Page: Onboarding (handbook/onboarding)" in text
    assert "Page: Onboarding (handbook/onboarding)" in html


def test_a_digest_names_each_page_by_its_path_as_well_as_its_title(ctx, smtp):
    watch("home", "alice")
    edit("handbook/onboarding", "bob", "An edit")
    edit("home", "bob", "Another page")
    run_jobs(ctx)
    text, html = bodies(smtp.inbox.messages[0])
    assert "== Onboarding (handbook/onboarding) ==" in text
    assert "== Home (home) ==" in text
    assert "Onboarding <span" in html and "(handbook/onboarding)</span></h2>" in html


def test_a_page_title_cannot_inject_markup(ctx, smtp):
    wiki.save_page(main_site(), user("bob"), "handbook/onboarding",
                   '<script>alert("x")</script><b>Bold</b>', "v2")
    run_jobs(ctx)
    text, html = bodies(smtp.inbox.messages[0])
    assert "<script>" not in html and "<b>Bold</b>" not in html
    assert "&lt;script&gt;" in html
    assert '<script>alert("x")</script>' in text  # plain text is not HTML


def test_a_mail_speaks_the_recipients_language(ctx, smtp):
    """French and German, each with its own typography: the title quoted as each quotes it,
    and the plain-text footer's "label: link" with French's narrow no-break space."""
    watch("handbook/onboarding", "carol")  # carol's locale is fr
    user("alice").locale = "de"  # she watches Onboarding (the seed)
    db.session.commit()
    edit("handbook/onboarding", "bob", "Une modification")
    run_jobs(ctx)
    carol = next(m for m in smtp.inbox.messages if m["To"] == "carol@example.com")
    assert carol["Subject"] == "[Main wiki] Onboarding\u202f: 1 modification par Bob Builder"
    text, _ = bodies(carol)
    assert "Gérer les notifications\u202f: http" in text
    assert "Se désabonner\u202f: http" in text and "Ouvrir\u202f: http" in text
    alice = next(m for m in smtp.inbox.messages if m["To"] == "alice@example.com")
    assert alice["Subject"] == "[Main wiki] Onboarding: 1 Bearbeitung von Bob Builder"
    text, html = bodies(alice)
    assert "Benachrichtigungen verwalten: http" in text and "Abbestellen: http" in text
    assert "Benachrichtigungen verwalten" in html


def test_a_worker_whose_clock_lags_still_sends_what_is_due(ctx, smtp, monkeypatch):
    """Which mail is due is judged by the database's clock, as the claim judges it: a
    worker an hour behind still finds it (rather than being sent again and again for
    mail it cannot see)."""
    behind = datetime.now(UTC) - timedelta(hours=1)
    monkeypatch.setattr(drain, "utcnow", lambda: behind)
    edit("handbook/onboarding", "bob", "Due now")
    run_jobs(ctx)
    assert [m["To"] for m in smtp.inbox.messages] == ["alice@example.com"]


# -- who gets none ------------------------------------------------------------------------------


def test_unverified_and_inactive_accounts_get_no_mail(ctx, smtp):
    watch("handbook/onboarding", "dave")  # unverified
    watch("handbook/onboarding", "carol")
    set_delay(60)
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    user("carol").active = False  # deactivated while her mail waited
    db.session.execute(sa.update(Notification).values(email_after=datetime.now(UTC)))
    db.session.commit()
    deliver(ctx)
    assert [m["To"] for m in smtp.inbox.messages] == ["alice@example.com"]
    assert entries_for("dave")[0].email_state == "none"
    assert entries_for("carol")[0].email_state == "skipped"


def test_the_site_switch_skips_pending_mail(ctx, smtp):
    set_delay(60)
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    set_site_enabled(db.session, str(main_site().id), False)
    db.session.execute(sa.update(Notification).values(email_after=datetime.now(UTC)))
    db.session.commit()
    deliver(ctx)
    assert smtp.inbox.raw == []
    assert entries_for("alice")[0].email_state == "skipped"


def test_a_category_turned_off_since_is_dropped_not_mailed(ctx, smtp):
    set_delay(60)
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    prefer("alice", "watchedPage", email=False)
    db.session.execute(sa.update(Notification).values(email_after=datetime.now(UTC)))
    db.session.commit()
    deliver(ctx)
    assert smtp.inbox.raw == []
    assert entries_for("alice")[0].email_state == "skipped"


def test_an_email_only_entry_closes_when_sent(ctx, smtp):
    prefer("alice", "watchedPage", inApp=False)
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.in_app, entry.email_state) == (False, "sent")
    assert entry.read_at == entry.emailed_at


# -- failures -------------------------------------------------------------------------------


def test_smtp_down_is_retried_and_sent_when_it_returns(ctx, smtp):
    smtp.stop()
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.email_state, entry.email_attempts) == ("pending", 1)
    assert entry.email_after > datetime.now(UTC) + timedelta(seconds=30)  # backing off
    assert "Connection" in entry.email_error or "refused" in entry.email_error.lower()
    smtp.start()
    entry.email_after = datetime.now(UTC)
    db.session.commit()
    deliver(ctx)
    assert len(smtp.inbox.raw) == 1
    assert entries_for("alice")[0].email_state == "sent"


def test_after_the_last_attempt_the_mail_is_failed_with_its_reason(ctx, smtp):
    smtp.stop()
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    for _ in range(2):
        db.session.execute(sa.update(Notification).values(email_after=datetime.now(UTC)))
        db.session.commit()
        deliver(ctx)
    [entry] = entries_for("alice")
    assert (entry.email_state, entry.email_attempts) == ("failed", 3)
    assert entry.email_error


def test_an_address_that_cannot_be_used_fails_at_once(ctx, smtp):
    user("alice").email = "alice at example dot com"
    db.session.commit()
    edit("handbook/onboarding", "bob", "Edit")
    watch("handbook/onboarding", "carol")
    edit("handbook/onboarding", "bob", "Edit again")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.email_state, entry.email_attempts) == ("failed", 0)
    assert "cannot be built" in entry.email_error
    assert [m["To"] for m in smtp.inbox.messages] == ["carol@example.com"]  # batch goes on
    client = ctx.test_client()
    login(client, "admin")
    admin_page = client.get("/_notifications/admin").get_data(as_text=True)
    assert "the message cannot be built: not a usable address" in admin_page


def test_a_lapsed_lease_is_the_only_way_a_mail_goes_twice(ctx, smtp):
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    assert len(smtp.inbox.raw) == 1
    deliver(ctx)
    assert len(smtp.inbox.raw) == 1  # sent is sent
    # A worker killed after the SMTP handoff, before its commit: the rows stay 'sending'.
    db.session.execute(sa.update(Notification).values(
        email_state="sending", email_after=datetime.now(UTC) + timedelta(minutes=5)))
    db.session.commit()
    deliver(ctx)
    assert len(smtp.inbox.raw) == 1  # the lease still runs: nobody else sends
    db.session.execute(sa.update(Notification).values(
        email_after=datetime.now(UTC) - timedelta(seconds=1)))
    db.session.commit()
    deliver(ctx)
    assert len(smtp.inbox.raw) == 2  # lapsed: taken again and sent again (at-least-once)


# -- one-click unsubscribe ----------------------------------------------------------------------


@pytest.fixture
def received(ctx, smtp):
    """A mail alice received about a mention and a watched page (a digest of two)."""
    edit("handbook/onboarding", "bob", "Edit")
    wiki.add_comment(page("home"), user("carol"), "@alice look")
    run_jobs(ctx)
    [message] = smtp.inbox.messages
    return message


def email_prefs(name: str) -> dict:
    from wikinotify.models import Preference

    db.session.expire_all()
    rows = db.session.scalars(sa.select(Preference).where(
        Preference.user_id == str(user(name).id)))
    return {(r.category, r.channel): r.enabled for r in rows}


def test_one_click_turns_email_off_for_the_mails_categories(ctx, received):
    url = site_relative(unsubscribe_url(received))
    anonymous = ctx.test_client()
    response = anonymous.post(url, data=ONE_CLICK)
    assert (response.status_code, response.data) == (200, b"")
    assert email_prefs("alice") == {("mention", "email"): False, ("watchedPage", "email"): False}
    again = anonymous.post(url, data=ONE_CLICK)
    assert (again.status_code, again.data) == (200, b"")
    assert email_prefs("alice") == {("mention", "email"): False, ("watchedPage", "email"): False}
    audits = db.session.scalars(sa.select(AuditLog).where(
        AuditLog.action == "unsubscribeNotifications")).all()
    assert [(a.actor_id, a.kind) for a in audits] == [(str(user("alice").id), "profile")]


def test_stop_all_notification_email(ctx, received):
    url = site_relative(unsubscribe_url(received))
    response = ctx.test_client().post(url, data={"scope": "all"})
    assert response.status_code == 200
    assert "no longer receive notification email" in response.get_data(as_text=True)
    prefs = email_prefs("alice")
    assert all(channel == "email" and not on for (_, channel), on in prefs.items())
    assert ("commentReply", "email") in prefs and ("inApp") not in {c for _, c in prefs}


def test_get_names_the_categories_and_changes_nothing(ctx, received):
    url = site_relative(unsubscribe_url(received))
    response = ctx.test_client().get(url)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Mentions" in html and "Pages you watch" in html
    assert "Unsubscribe from these" in html and "Stop all notification email" in html
    assert email_prefs("alice") == {}


def test_unsubscribing_cancels_pending_mail_of_those_categories(ctx, received, smtp):
    set_delay(60)
    edit("handbook/onboarding", "bob", "Later")
    db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
    db.session.commit()
    edit("handbook/onboarding", "bob", "Later still")
    run_jobs(ctx)
    pending = entries_for("alice", email_state="pending")
    assert len(pending) == 1
    ctx.test_client().post(site_relative(unsubscribe_url(received)), data=ONE_CLICK)
    assert entries_for("alice", id=pending[0].id)[0].email_state == "skipped"


def tampered_tokens(token: str) -> list[str]:
    from wikinotify.mail.tokens import make_token

    # A character in the middle of the signature: the last one partly encodes padding
    # bits, so changing it may not change the decoded signature at all.
    middle = len(token) - 10
    flipped = token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1:]
    other_secret = make_token(b"x" * 32, "1", ["mention"])
    payload, signature = token.rsplit(".", 1)
    return ["", "garbage", flipped, token[: len(token) // 2], other_secret,
            f"{payload}x.{signature}", "." + signature]


def test_every_kind_of_bad_token_is_a_400_that_says_nothing(ctx, received):
    url = unsubscribe_url(received)
    token = parse_qs(urlsplit(url).query)["t"][0]
    client = ctx.test_client()
    for bad in tampered_tokens(token):
        response = client.post("/_notifications/unsubscribe", query_string={"t": bad},
                               data=ONE_CLICK)
        assert (response.status_code, response.data) == (400, b""), bad
        assert client.get("/_notifications/unsubscribe",
                          query_string={"t": bad}).status_code == 400
    assert email_prefs("alice") == {}


def test_a_token_from_last_year_still_works(ctx):
    from wikinotify.mail.tokens import make_token, read_token

    secret = instance_settings(db.session).unsubscribe_secret
    token = make_token(secret, "42", ["mention", "watchedPage"])
    assert read_token(secret, token).categories == ("mention", "watchedPage")


def test_a_token_compressed_as_itsdangerous_does_still_reads_and_a_new_one_too():
    """Tokens were compressed with zlib's default window until 2026-12-05, and now with a
    small one (tokens._payload): links already mailed keep working, and a long payload
    is still made shorter."""
    from wikinotify.mail.tokens import make_token, read_token

    secret = b"x" * 32
    categories = ["watched_page", "comment_reply", "mention", "page_created", "page_deleted",
                  "review_requested", "suggestion_reviewed", "announcement"]
    mailed = (".eJw1i80KwyAYBN9lz7mkfwdfpRQRXUwg-UyNJoTSd69GepuZZT_YoPoOGQr95Xq7P9DBQj1hREIW"
              "y5mSagtzJR25TEfxKmOQQovx1DbSJLq_Ok5sGrmN3Mvtnbm2tGbvC5e3butZd5PsQKfrH6_vD9x-N"
              "Jo._aSeGIEeb362fWFFpeyGAppz1F-bKl_2Fyr5gLwtbII")
    assert read_token(secret, mailed).categories == tuple(sorted(categories))
    made = make_token(secret, "123456", categories)
    assert made.startswith(".") and len(made) < len(mailed) + 8
    assert read_token(secret, made) == read_token(secret, mailed)


@pytest.mark.app_config(smtp=True, WIKINOTIFY_UNSUBSCRIBE_RATE=5)
class TestRateLimit:
    def test_the_public_post_is_rate_limited_per_address(self, ctx):
        client = ctx.test_client()
        codes = [client.post("/_notifications/unsubscribe", query_string={"t": "x"},
                             data=ONE_CLICK).status_code for _ in range(8)]
        assert codes == [400] * 5 + [429] * 3


# -- DKIM ---------------------------------------------------------------------------------------


@pytest.mark.app_config(lambda dkim_key: {"WIKINOTIFY_DKIM_PRIVATE_KEY": str(dkim_key[0])},
                        smtp=True, MAIL_DEFAULT_SENDER="wiki@localhost",
                        WIKINOTIFY_DKIM_SELECTOR="wiki", WIKINOTIFY_DKIM_DOMAIN="localhost")
class TestDkim:
    def test_mail_is_signed_with_both_unsubscribe_headers_covered(self, ctx, smtp, dkim_key):
        import dkim

        edit("handbook/onboarding", "bob", "Edit")
        run_jobs(ctx)
        [raw] = smtp.inbox.raw
        [message] = smtp.inbox.messages
        signed = message["DKIM-Signature"].replace("\r\n", "").replace(" ", "")
        headers = next(part for part in signed.split(";") if part.startswith("h="))
        assert "list-unsubscribe" in headers.lower().split(":")
        assert "list-unsubscribe-post" in headers.lower().split(":")

        def dns(name, timeout=5):
            assert name == b"wiki._domainkey.localhost."
            return b"v=DKIM1; k=rsa; p=" + dkim_key[1]

        assert dkim.verify(raw, dnsfunc=dns)
        tampered = raw.replace(b"List-Unsubscribe-Post: List-Unsubscribe=One-Click",
                               b"List-Unsubscribe-Post: nothing")
        assert not dkim.verify(tampered, dnsfunc=dns)


def test_a_half_configured_dkim_key_stops_the_app_naming_the_setting(database_url, redis_url):
    from tests.helpers.app import make_app
    from wikinotify.config import ConfigError

    with pytest.raises(ConfigError, match="WIKINOTIFY_DKIM_PRIVATE_KEY"):
        make_app(database_url, WIKINOTIFY_REDIS_URL=redis_url,
                 WIKINOTIFY_DKIM_SELECTOR="wiki", WIKINOTIFY_DKIM_DOMAIN="localhost")
