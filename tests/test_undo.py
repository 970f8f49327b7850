"""Undo and unread (docs/rules.md#undo, docs/rules.md#unread-again): a dismissed entry or a
"mark all read" comes back as it was, once, for its own reader, within five minutes; a read
entry can be unread again without breaking coalescing; and the unsubscribe confirmation's
"Subscribe again". SQLite and PostgreSQL, entries made by a real worker from the demo
wiki's own actions."""

from __future__ import annotations

import base64
import re
import time
import zlib
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login
from tests.helpers.wiki import alice_token, edit, email_off, entries_for, page, user, watch
from wikinotify.inbox import undo
from wikinotify.instance_settings import instance_settings
from wikinotify.mail import tokens
from wikinotify.models import Notification

API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"

pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


@pytest.fixture
def one_entry(app):
    """Alice watches Onboarding (seed); Bob saves it twice: one unread entry, its mail
    pending."""
    with app.app_context():
        edit("handbook/onboarding", "bob", "First")
        edit("handbook/onboarding", "bob", "Second")
    run_jobs(app)


def row(app, name="alice") -> dict:
    with app.app_context():
        [entry] = entries_for(name)
        return {c.key: getattr(entry, c.key) for c in Notification.__table__.columns}


def bob_edits_again(app, content="Again"):
    with app.app_context():
        edit("handbook/onboarding", "bob", content)
    run_jobs(app)


def entry_id(client) -> int:
    [item] = client.get(API).get_json()["items"]
    return item["id"]


def test_a_read_entry_is_unread_again_and_a_later_event_joins_it(app, one_entry, as_alice):
    entry = entry_id(as_alice)
    as_alice.put(f"{API}/{entry}/read", json={})
    assert as_alice.put(f"{API}/{entry}/unread", json={}).status_code == 204
    assert as_alice.put(f"{API}/{entry}/unread", json={}).status_code == 204  # idempotent
    unread = row(app)
    assert unread["read_at"] is None
    assert unread["email_state"] == "skipped"  # reading cancelled it: unread does not resend
    bob_edits_again(app)
    with app.app_context():
        [joined] = entries_for("alice")
    assert (joined.id, joined.count, joined.read_at) == (entry, 3, None)


def test_unread_with_a_newer_unread_twin_is_a_409_and_stays_read(app, one_entry, as_alice):
    old = entry_id(as_alice)
    as_alice.put(f"{API}/{old}/read", json={})
    bob_edits_again(app)  # a new unread entry about the same thing
    response = as_alice.put(f"{API}/{old}/unread", json={})
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "newer_unread"
    with app.app_context():
        rows = entries_for("alice")
    assert sorted((e.id == old, e.read_at is None) for e in rows) == [(False, True), (True, False)]


def test_someone_elses_entry_answers_unread_exactly_like_a_missing_one(app, one_entry, client):
    with app.app_context():
        [entry] = entries_for("alice")
    login(client, "carol")
    theirs = client.put(f"{API}/{entry.id}/unread", json={})
    missing = client.put(f"{API}/999999/unread", json={})
    assert theirs.status_code == missing.status_code == 404
    assert theirs.get_json() == missing.get_json()


def test_undoing_a_dismissal_puts_the_row_back_as_it_was_once(app, one_entry, as_alice):
    before = row(app)
    assert before["email_state"] == "pending"
    dismissed = as_alice.delete(f"{API}/{before['id']}", json={})
    assert dismissed.status_code == 200
    token = dismissed.get_json()["undoToken"]
    assert as_alice.get(API).get_json()["items"] == []
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}
    assert row(app) == before
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 0}
    assert row(app) == before
    bob_edits_again(app)  # the entry is back in its slot: the event joins it
    assert (row(app)["id"], row(app)["count"]) == (before["id"], 3)


def readable(part: str) -> str:
    """What a client reads in one dot-separated part of a token: its base64, inflated
    when it is zlib-compressed."""
    raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    try:
        raw = zlib.decompress(raw)
    except zlib.error:
        pass
    return raw.decode("latin-1")


def test_a_dismissed_entry_whose_mail_was_sending_comes_back_skipped(app, one_entry,
                                                                      as_alice):
    """Its mail run's lease is gone with the row: never pending again, never `sending`."""
    with app.app_context():
        db.session.execute(sa.update(Notification).values(email_state="sending"))
        db.session.commit()
    token = as_alice.delete(f"{API}/{entry_id(as_alice)}", json={}).get_json()["undoToken"]
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}
    assert row(app)["email_state"] == "skipped"


def test_a_dismissal_token_shows_the_client_nothing_of_the_row(app, one_entry, as_alice):
    """Sealed, not just signed: the snapshot's title, the SMTP error meant for admins and
    the actor's id are not in the token, and the undo still restores the row exactly."""
    with app.app_context():
        [entry] = entries_for("alice")
        entry.email_error = "550 mailbox-of-the-admins-only"
        db.session.commit()
    before = row(app)
    token = as_alice.delete(f"{API}/{before['id']}", json={}).get_json()["undoToken"]
    shown = "".join(readable(part) for part in token.split("."))
    for secret in ("Onboarding", "mailbox-of-the-admins-only"):
        assert secret not in shown and secret not in token
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}
    assert row(app) == before


def test_a_dismissal_undone_after_a_twin_took_the_slot_comes_back_read(app, one_entry,
                                                                       as_alice):
    old = entry_id(as_alice)
    token = as_alice.delete(f"{API}/{old}", json={}).get_json()["undoToken"]
    bob_edits_again(app)
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}
    with app.app_context():
        rows = entries_for("alice")
    # On SQLite the newer entry may have taken the old id: the old one is known by its count.
    assert sorted((e.count, e.read_at is None, e.email_state) for e in rows) == [
        (1, True, "pending"), (2, False, "skipped")]


def test_undoing_mark_all_read_makes_them_unread_with_their_mail(app, one_entry, as_alice):
    with app.app_context():
        watch("home", "alice")
        edit("home", "bob", "Home edit")
    run_jobs(app)
    with app.app_context():
        before = {e.id: (e.read_at, e.email_state) for e in entries_for("alice")}
    assert set(before.values()) == {(None, "pending")}
    marked = as_alice.put(f"{API}/read", json={}).get_json()
    assert marked["marked"] == 2
    with app.app_context():
        assert {e.email_state for e in entries_for("alice")} == {"skipped"}
    undone = as_alice.post(f"{API}/undo", json={"token": marked["undoToken"]})
    assert undone.get_json() == {"restored": 2}
    with app.app_context():
        assert {e.id: (e.read_at, e.email_state) for e in entries_for("alice")} == before
    # Idempotent; and an entry read since is not made unread by the old token.
    one = next(iter(before))
    as_alice.put(f"{API}/{one}/read", json={})
    again = as_alice.post(f"{API}/undo", json={"token": marked["undoToken"]})
    assert again.get_json() == {"restored": 0}
    with app.app_context():
        assert db.session.get(Notification, one).read_at is not None


def read_states(client) -> list[tuple[str, bool]]:
    """Her inbox as she sees it: each entry's page and whether it shows as read."""
    return sorted((item["page"]["path"], item["readAt"] is not None)
                  for item in client.get(API).get_json()["items"])


def test_mark_all_read_reads_what_she_had_then_and_its_undo_gives_back_only_that(
        app, one_entry, as_alice):
    # What "mark all read" promises, however it is built
    # (docs/benchmarks.md#the-inbox-at-scale): her badge and list say read at once, another
    # reader's entries and entries that arrive after are untouched, and the undo gives back
    # exactly what it read.
    with app.app_context():
        watch("home", "alice")
        watch("home", "carol")
        edit("home", "bob", "Home edit")
    run_jobs(app)
    with app.app_context():
        carol = [(e.id, e.read_at, e.email_state) for e in entries_for("carol")]
    assert len(carol) == 1 and carol[0][1] is None
    token = as_alice.put(f"{API}/read", json={}).get_json()["undoToken"]
    assert as_alice.get(f"{API}/summary").get_json()["unread"] == 0
    assert read_states(as_alice) == [("handbook/onboarding", True), ("home", True)]
    with app.app_context():
        edit("home", "bob", "Home edited after")  # arrives after: a new unread entry
    run_jobs(app)
    assert as_alice.get(f"{API}/summary").get_json()["unread"] == 1
    assert read_states(as_alice) == [("handbook/onboarding", True), ("home", False),
                                     ("home", True)]
    assert as_alice.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}
    # Onboarding is unread again; the home entry it read stays read, since the newer one
    # holds its slot (docs/rules.md#undo); the newer one is as it arrived.
    assert read_states(as_alice) == [("handbook/onboarding", False), ("home", False),
                                     ("home", True)]
    assert as_alice.get(f"{API}/summary").get_json()["unread"] == 2
    with app.app_context():
        assert [(e.id, e.read_at, e.email_state) for e in entries_for("carol")
                if e.id == carol[0][0]] == carol


def expired(token: str, secret) -> str:
    """The same payload, sealed six minutes ago."""
    box = undo._box(secret)
    return box.encrypt_at_time(box.decrypt(token.encode()), int(time.time()) - 360).decode()


def test_a_bad_an_expired_or_another_readers_token_is_refused_alike(app, one_entry, client):
    login(client, "alice")
    entry = entry_id(client)
    token = client.delete(f"{API}/{entry}", json={}).get_json()["undoToken"]
    client.post("/logout")
    login(client, "carol")
    refusals = [client.post(f"{API}/undo", json={"token": token})]
    client.post("/logout")
    login(client, "alice")
    refusals += [
        client.post(f"{API}/undo", json={"token": expired(token, app.secret_key)}),
        client.post(f"{API}/undo", json={"token": token[:-2] + "xx"}),
        client.post(f"{API}/undo", json={"token": "nonsense"}),
    ]
    for refused in refusals:
        assert refused.status_code == 400
        assert refused.get_json() == refusals[0].get_json()
        assert list(refused.get_json()["error"]["fields"]) == ["token"]
    with app.app_context():
        assert entries_for("alice") == []
    missing = client.post(f"{API}/undo", json={})
    assert missing.status_code == 400 and "token" in missing.get_json()["error"]["fields"]
    assert client.post(f"{API}/undo", json={"token": token}).get_json() == {"restored": 1}


@pytest.mark.parametrize("write", ["unread", "undo"])
def test_unread_and_undo_change_the_summary(app, one_entry, as_alice, write):
    entry = entry_id(as_alice)
    if write == "unread":
        as_alice.put(f"{API}/{entry}/read", json={})
        call = lambda: as_alice.put(f"{API}/{entry}/unread", json={})  # noqa: E731
    else:
        token = as_alice.delete(f"{API}/{entry}", json={}).get_json()["undoToken"]
        call = lambda: as_alice.post(f"{API}/undo", json={"token": token})  # noqa: E731
    before = as_alice.get(f"{API}/summary")
    assert before.get_json()["unread"] == 0
    assert call().status_code < 400
    after = as_alice.get(f"{API}/summary", headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200 and after.get_json()["unread"] == 1


def test_the_inbox_page_marks_a_read_entry_unread_without_javascript(app, one_entry, as_alice):
    entry = entry_id(as_alice)
    as_alice.put(f"{API}/{entry}/read", json={})
    html = as_alice.get(INBOX).get_data(as_text=True)
    assert f'action="{INBOX}/{entry}/unread"' in html and "Mark as unread" in html
    token = csrf_token(html)
    response = as_alice.post(f"{INBOX}/{entry}/unread", data={"csrf_token": token})
    assert response.status_code == 302
    assert "wn-unread" in as_alice.get(INBOX).get_data(as_text=True)
    as_alice.put(f"{API}/{entry}/read", json={})
    french = as_alice.get(INBOX, headers={"Accept-Language": "fr"}).get_data(as_text=True)
    assert "Marquer comme non lue" in french and "Annuler" in french


def test_subscribe_again_turns_the_email_back_on(app, client):
    url = f"/_notifications/unsubscribe?t={alice_token(app)}"
    done = client.post(url).get_data(as_text=True)
    assert email_off(app) == {"watchedPage", "mention"}
    action = re.search(r'action="([^"]*/resubscribe[^"]*)"', done).group(1).replace("&amp;", "&")
    assert "Subscribe again" in done
    again = client.post(action)
    assert again.status_code == 200
    assert "You will receive email for these notifications again." in again.get_data(as_text=True)
    assert email_off(app) == set()
    assert client.post(action).status_code == 200  # idempotent
    refused = client.post("/_notifications/resubscribe?t=forged")
    assert refused.status_code == 400 and email_off(app) == set()


def test_a_mailed_unsubscribe_token_never_turns_email_back_on(app, client):
    """A mailed link only ever turns mail off (docs/rules.md#one-click-unsubscribe): only the
    confirmation's own short-lived token subscribes again."""
    mailed = alice_token(app)
    done = client.post(f"/_notifications/unsubscribe?t={mailed}").get_data(as_text=True)
    refused = client.post(f"/_notifications/resubscribe?t={mailed}")
    assert refused.status_code == 400 and email_off(app) == {"watchedPage", "mention"}
    action = re.search(r'action="([^"]*/resubscribe[^"]*)"', done).group(1).replace("&amp;", "&")
    again = parse_qs(urlsplit(action).query)["t"][0]
    assert again != mailed
    with app.app_context():
        secret = instance_settings(db.session).unsubscribe_secret
    stale = signed_ago(tokens.read_resubscribe_token(secret, again), secret,
                       tokens.RESUBSCRIBE_SECONDS + 60)
    assert client.post(f"/_notifications/resubscribe?t={stale}").status_code == 400
    assert email_off(app) == {"watchedPage", "mention"}
    assert client.post(action).status_code == 200 and email_off(app) == set()


def signed_ago(token: tokens.Unsubscribe, secret: bytes, seconds: int) -> str:
    """A "Subscribe again" token for ``token``'s reader and categories, signed ``seconds``
    ago."""

    class Ago(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - seconds

    serializer = URLSafeTimedSerializer(
        secret, salt=tokens.SALTS["resubscribe"], signer=Ago,
        signer_kwargs={"digest_method": tokens.hashlib.sha256})
    return serializer.dumps({"v": tokens.VERSION, "p": "resubscribe", "u": token.user_id,
                             "c": list(token.categories)})


def test_subscribe_again_after_stop_all_names_what_was_stopped(app, client):
    url = f"/_notifications/unsubscribe?t={alice_token(app, ['mention'])}"
    done = client.post(url, data={"scope": "all"}).get_data(as_text=True)
    stopped = email_off(app)
    assert {"watchedPage", "mention"} <= stopped
    action = re.search(r'action="([^"]*/resubscribe[^"]*)"', done).group(1).replace("&amp;", "&")
    client.post(action)
    assert email_off(app) == set()
    # Already unsubscribed: nothing was turned off, so nothing to subscribe again to.
    client.post(url, data={"scope": "all"})
    assert "Subscribe again" not in client.post(url, data={"scope": "all"}).get_data(as_text=True)


def test_another_readers_rows_are_never_touched_by_undo(app, one_entry, client):
    """A token names its reader; the restored row is the caller's own."""
    with app.app_context():
        watch("handbook/onboarding", "carol")
        carol = str(user("carol").id)
        home = page("home")
        assert home is not None
    bob_edits_again(app)
    login(client, "alice")
    marked = client.put(f"{API}/read", json={}).get_json()
    client.post(f"{API}/undo", json={"token": marked["undoToken"]})
    with app.app_context():
        carols = db.session.scalars(sa.select(Notification).where(
            Notification.user_id == carol)).all()
    assert [c.read_at for c in carols] == [None]
