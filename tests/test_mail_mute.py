"""Mute a page from its mail, subjects that name the pages, and mails that thread by page
(docs/channels.md#email, docs/rules.md#what-a-mail-says): real RQ workers, a real Redis and a
real SMTP server on 127.0.0.1, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.models import db
from tests.helpers.jobs import deliver, run_jobs
from tests.helpers.mail import bodies
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, page, set_delay, user, watch
from wikinotify.mail import drain
from wikinotify.mail.tokens import make_mute_token
from wikinotify.models import Mute, Notification, SkipReason
from wikinotify.preferences import mutes

pytestmark = [
    pytest.mark.app_config(smtp=True),
    pytest.mark.mail_delay(0),
]

MUTE_LINK = re.compile(r"Mute this page: (\S+)")


def mute_urls(message) -> list[str]:
    """The mail's "Mute this page" links, as its text part gives them, in order."""
    text, html = bodies(message)
    found = MUTE_LINK.findall(text)
    assert [u.replace("&", "&amp;") for u in found] == re.findall(
        r'<a href="([^"]+)"[^>]*>Mute this page</a>', html)
    return found


def site_relative(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def muted(name: str, path: str) -> bool:
    db.session.expire_all()
    return mutes.is_muted(db.session, str(user(name).id), "page", str(page(path).id))


def mail_for(smtp, name: str):
    return [m for m in smtp.inbox.messages if m["To"] == f"{name}@example.com"]


# -- the link ----------------------------------------------------------------------------


def test_a_mail_links_a_mute_of_its_page_beside_unsubscribe_and_get_changes_nothing(ctx, smtp):
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    [message] = smtp.inbox.messages
    [url] = mute_urls(message)
    assert urlsplit(url).path == "/_notifications/mute"
    text, _ = bodies(message)
    footer = text.split("-- \r\n", 1)[1]
    assert footer.index("Mute this page") < footer.index("Unsubscribe:")
    page_shown = ctx.test_client().get(site_relative(url))  # no session
    assert page_shown.status_code == 200
    assert "Stop all notifications about Onboarding" in page_shown.get_data(as_text=True)
    assert not muted("alice", "handbook/onboarding")


@pytest.fixture
def digest(ctx, smtp):
    """alice's digest about two pages, Home the newer."""
    watch("home", "alice")
    edit("handbook/onboarding", "bob", "One")
    edit("home", "bob", "Two")
    run_jobs(ctx)
    [message] = smtp.inbox.messages
    return message


def test_a_digest_links_a_mute_under_each_page(ctx, digest):
    message = digest
    text, _ = bodies(message)
    home, onboarding = mute_urls(message)  # newest first
    home_heading, onboarding_heading = "== Home (home) ==", "== Onboarding (handbook/onboarding) =="
    assert text.index(home_heading) < text.index(home) < text.index(onboarding_heading)
    assert text.index(onboarding_heading) < text.index(onboarding)
    ctx.test_client().post(site_relative(onboarding))
    assert muted("alice", "handbook/onboarding") and not muted("alice", "home")


# -- the POST ----------------------------------------------------------------------------


def test_posting_the_link_mutes_the_page_with_no_session_and_cancels_its_pending_mail(ctx, smtp):
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    [url] = mute_urls(smtp.inbox.messages[0])
    set_delay(60)
    db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
    db.session.commit()
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    [pending] = entries_for("alice", email_state="pending")

    client = ctx.test_client()
    for _ in range(2):  # idempotent
        response = client.post(site_relative(url))
        assert response.status_code == 200
        assert "You will no longer hear about Onboarding." in response.get_data(as_text=True)
    assert muted("alice", "handbook/onboarding")
    assert db.session.scalar(sa.select(sa.func.count()).select_from(Mute)) == 1
    assert entries_for("alice", id=pending.id)[0].email_state == "skipped"
    edit("handbook/onboarding", "bob", "Three")
    run_jobs(ctx)
    assert len(entries_for("alice")) == 2  # the muted page tells her nothing new


def bad_tokens(good: str, unsubscribe: str) -> list[str]:
    middle = len(good) - 10  # the signature's middle: its last letter may be padding
    flipped = good[:middle] + ("A" if good[middle] != "A" else "B") + good[middle + 1:]
    payload, signature = good.rsplit(".", 1)
    return ["", "garbage", flipped, good[: len(good) // 2], f"{payload}x.{signature}",
            make_mute_token(b"x" * 32, "1", "1"),  # another secret
            unsubscribe]  # signed by the same secret, for the same reader: another purpose


def test_every_kind_of_bad_token_is_a_400_that_says_nothing(ctx, smtp):
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    [message] = smtp.inbox.messages
    [url] = mute_urls(message)
    good = parse_qs(urlsplit(url).query)["t"][0]
    list_unsubscribe = message["List-Unsubscribe"].split(",")[0].strip().strip("<>")
    unsubscribe = parse_qs(urlsplit(list_unsubscribe).query)["t"][0]
    client = ctx.test_client()
    for bad in bad_tokens(good, unsubscribe):
        response = client.post("/_notifications/mute", query_string={"t": bad})
        assert (response.status_code, response.data) == (400, b""), bad
        shown = client.get("/_notifications/mute", query_string={"t": bad})
        assert shown.status_code == 400
        assert "This link is not valid." in shown.get_data(as_text=True)
    assert not muted("alice", "handbook/onboarding")


@pytest.mark.app_config(smtp=True, WIKINOTIFY_UNSUBSCRIBE_RATE=5)
def test_refused_tokens_are_rate_limited_as_unsubscribes_are(ctx):
    client = ctx.test_client()
    codes = [client.post("/_notifications/mute", query_string={"t": "x"}).status_code
             for _ in range(8)]
    assert codes == [400] * 5 + [429] * 3


# -- subjects ----------------------------------------------------------------------------


def test_a_digest_subject_names_its_pages_in_english_and_in_french(ctx, smtp):
    watch("home", "alice")
    watch("home", "carol")
    watch("handbook/onboarding", "carol")
    edit("handbook/onboarding", "bob", "One")
    edit("ops/runbook", "bob", "Two")
    edit("home", "bob", "Three")
    run_jobs(ctx)
    [alice], [carol] = mail_for(smtp, "alice"), mail_for(smtp, "carol")
    assert alice["Subject"] == "[Main wiki] Home and 2 other pages: 3 notifications"
    assert carol["Subject"] == "[Main wiki] Home et 1 autre page\u202f: 2 notifications"


def test_a_digest_about_one_page_names_it(ctx, smtp):
    edit("handbook/onboarding", "bob", "One")
    wiki.add_comment(page("handbook/onboarding"), user("carol"), "A comment")
    run_jobs(ctx)
    [message] = smtp.inbox.messages
    assert message["Subject"] == "[Main wiki] Onboarding: 2 notifications"


def read_everything() -> None:
    db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
    db.session.commit()


def test_a_mail_s_subject_names_the_page_what_happened_and_everyone_who_did_it(ctx, smtp):
    """One entry's mail: "Page: 3 edits by Bob Builder and Carol Danvers", whoever acted
    last first; past two people, "and N others"; in the reader's language, counted with
    its plural rules, for every category that has the words."""
    watch("handbook/onboarding", "carol")  # alice watches it (seed); carol reads French
    edit("handbook/onboarding", "dave", "One")
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    [alice], [carol] = mail_for(smtp, "alice"), mail_for(smtp, "carol")
    assert alice["Subject"] == "[Main wiki] Onboarding: 2 edits by Bob Builder and Dave Lister"
    assert carol["Subject"] == (
        "[Main wiki] Onboarding\u202f: 2 modifications par Bob Builder et Dave Lister")
    read_everything()

    for editor in ("carol", "dave", "admin", "bob", "dave"):
        edit("ops/runbook", editor, f"By {editor}")
    run_jobs(ctx)
    assert mail_for(smtp, "alice")[-1]["Subject"] == (
        "[Main wiki] Runbook: 5 edits by Dave Lister and 3 others")
    read_everything()

    wiki.add_comment(page("handbook/onboarding"), user("bob"), "A comment")
    wiki.add_comment(page("handbook/onboarding"), user("dave"), "Another")
    run_jobs(ctx)
    assert mail_for(smtp, "alice")[-1]["Subject"] == (
        "[Main wiki] Onboarding: 2 comments by Dave Lister and Bob Builder")
    assert mail_for(smtp, "carol")[-1]["Subject"] == (
        "[Main wiki] Onboarding\u202f: 2 commentaires par Dave Lister et Bob Builder")


@pytest.fixture
def two_actors_kept(monkeypatch):
    """``ACTORS_KEPT`` at 2 wherever it is read. The merge is built once per process with
    it as a constant: built again with 2, and again after the test with the real one."""
    from wikinotify import models
    from wikinotify.mail import compose
    from wikinotify.pipeline import upsert
    for module in (models, compose, upsert):
        monkeypatch.setattr(module, "ACTORS_KEPT", 2)
    upsert._statement.cache_clear()
    yield
    upsert._statement.cache_clear()


def test_an_entry_names_so_many_people_and_then_says_at_least(ctx, smtp, two_actors_kept):
    """An entry's data names at most ACTORS_KEPT people (a busy page's row stops growing);
    past them the subject says "N+ others"."""
    for editor in ("dave", "carol", "admin", "bob"):
        edit("handbook/onboarding", editor, f"By {editor}")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert len(entry.data["actors"]) == 2
    [message] = mail_for(smtp, "alice")
    assert message["Subject"] == "[Main wiki] Onboarding: 4 edits by Bob Builder and 2+ others"


# -- threads -----------------------------------------------------------------------------


def thread_of(message) -> str:
    assert message["In-Reply-To"] == message["References"]
    return message["In-Reply-To"]


def test_mails_about_one_page_thread_together_per_reader(ctx, smtp):
    watch("handbook/onboarding", "carol")
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
    db.session.commit()
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    db.session.execute(sa.update(Notification).values(read_at=datetime.now(UTC)))
    db.session.commit()
    edit("ops/runbook", "bob", "Three")
    run_jobs(ctx)
    first, second, runbook = mail_for(smtp, "alice")
    [carol, _] = mail_for(smtp, "carol")
    root = thread_of(first)
    assert re.fullmatch(r"<page-[0-9a-f]{32}@[^>]+>", root)  # a hash: names nobody
    assert thread_of(second) == root  # one thread, mail after mail
    assert root not in (first["Message-ID"], second["Message-ID"])
    assert first["Message-ID"] != second["Message-ID"]
    assert thread_of(runbook) != root  # another page
    assert thread_of(carol) != root  # another reader


def test_a_digest_threads_by_nothing(digest):
    assert digest["In-Reply-To"] is None and digest["References"] is None


# -- mutes at send time --------------------------------------------------------------------


@pytest.fixture
def alice_waits(ctx):
    """Bob saves Onboarding: alice's mail about it pending a minute; alice signed in."""
    set_delay(60)
    edit("handbook/onboarding", "bob", "One")
    run_jobs(ctx)
    [pending] = entries_for("alice", email_state="pending")
    client = ctx.test_client()
    login(client, "alice")
    return pending.id, client


def mute_onboarding(client) -> None:
    muting = client.put("/_notifications/api/mutes",
                        json={"kind": "page", "id": str(page("handbook/onboarding").id)})
    assert muting.status_code < 300


def send_what_is_due(ctx) -> None:
    """Every entry's mail pending and due now (however it came to be); then the minute's
    mail run."""
    db.session.execute(sa.update(Notification).values(email_state="pending",
                                                      email_after=datetime.now(UTC)))
    db.session.commit()
    deliver(ctx)


def test_mark_all_read_then_mute_then_undo_sends_nothing_about_the_muted_page(ctx, smtp,
                                                                            alice_waits):
    """Undo makes the cancelled mail pending again; the mail run re-checks mutes at send
    time (docs/rules.md#mutes) and drops it."""
    entry, client = alice_waits
    token = client.put("/_notifications/api/notifications/read", json={}).get_json()[
        "undoToken"]
    mute_onboarding(client)
    undone = client.post("/_notifications/api/notifications/undo", json={"token": token})
    assert undone.get_json() == {"restored": 1}
    assert entries_for("alice", id=entry)[0].email_state == "pending"
    send_what_is_due(ctx)
    assert mail_for(smtp, "alice") == []
    [skipped] = entries_for("alice", id=entry)
    assert (skipped.email_state, skipped.email_error) == (
        "skipped", drain.SKIPPED_BECAUSE[SkipReason.MUTED])


def test_a_pending_mail_about_a_page_muted_through_the_api_is_skipped_at_send_time(
        ctx, smtp, alice_waits):
    """However a mail about a muted page came to be pending again, the mail run drops it."""
    entry, client = alice_waits
    mute_onboarding(client)
    send_what_is_due(ctx)
    assert mail_for(smtp, "alice") == []
    assert entries_for("alice", id=entry)[0].email_error == drain.SKIPPED_BECAUSE[
        SkipReason.MUTED]


def test_a_run_rechecks_the_mutes_of_a_reader_who_has_any_and_mails_one_who_has_none(
        ctx, smtp, alice_waits):
    """The run re-checks each reader's entries against her mutes as they are now: in one
    run, alice's mail about the page she muted is skipped, carol's about the same page
    goes, and a mute of another page keeps nothing back."""
    entry, client = alice_waits
    watch("handbook/onboarding", "carol")
    ids = {name: str(user(name).id) for name in ("alice", "carol", "bob")}
    mute_onboarding(client)
    mutes.mute(db.session, ids["bob"], "page", str(page("home").id))
    db.session.commit()
    edit("handbook/onboarding", "bob", "Two")
    run_jobs(ctx)
    send_what_is_due(ctx)
    assert mail_for(smtp, "alice") == []
    assert len(mail_for(smtp, "carol")) == 1
    assert {e.email_state for e in entries_for("alice")} <= {"skipped"}
    assert entries_for("alice", id=entry)[0].email_error == drain.SKIPPED_BECAUSE[
        SkipReason.MUTED]


def test_a_mute_made_while_the_run_is_under_way_is_honoured_at_her_claim(
        ctx, smtp, alice_waits, monkeypatch):
    """The run reads its readers' preferences a chunk at a time, but her mutes are
    re-checked after her own claim: a mute committed after the chunk was read and before
    her mail is claimed (an undo made the mail pending again after the mute's cancel, as
    in the test above) still keeps the mail back."""
    from wikinotify.mail import claim as claiming

    entry, _client = alice_waits
    alice, onboarding = str(user("alice").id), str(page("handbook/onboarding").id)
    real_claim = claiming.claim

    def claim_after_a_mute(session, user_id, *args, **kwargs):
        if user_id == alice:
            with db.engine.begin() as connection:  # another request's, committed
                connection.execute(sa.insert(Mute).values(
                    user_id=alice, kind="page", target_id=onboarding,
                    created_at=datetime.now(UTC)))
        return real_claim(session, user_id, *args, **kwargs)

    monkeypatch.setattr(claiming, "claim", claim_after_a_mute)
    send_what_is_due(ctx)
    assert mail_for(smtp, "alice") == []
    assert entries_for("alice", id=entry)[0].email_error == drain.SKIPPED_BECAUSE[
        SkipReason.MUTED]
