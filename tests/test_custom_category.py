"""A new kind of event without touching wikinotify (docs/adopting.md#adding-a-kind-of-notification):
the wiki's own category, in a module of the wiki's (tests/helpers/custom_category.py) with strings
in the wiki's own catalogue, goes end to end — emit, a real fan-out, the inbox over the API and as a
page, the preferences page, coalescing and a mail to a real SMTP server, which goes out with the
site its reader last signed in on (docs/rules.md#the-mail-run, docs/rules.md#the-site-switch). Every
test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import sqlalchemy as sa
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from standardwebhooks import Webhook

from demo.extensions import notify
from demo.host import DemoHost
from demo.models import Group, Site, db
from tests.helpers import custom_category
from tests.helpers.jobs import run_jobs
from tests.helpers.receiver import Receiver
from tests.helpers.web import login
from tests.helpers.wiki import entries_for, events, set_delay, user
from wikinotify import CategoryError
from wikinotify.categories import N_, Registry
from wikinotify.host import Host
from wikinotify.models import Delivery, Endpoint, utcnow
from wikinotify.outbound import secrets_box, standard_webhooks
from wikinotify.state import state

API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"
PREFERENCES = "/_notifications/preferences"
PREFERENCES_API = "/_notifications/api/preferences"
#: The wiki's own catalogue: what `pybabel compile -d tests/translations` compiles.
WIKI_TRANSLATIONS = Path(__file__).parent / "translations"


def compiled_catalogue(directory: Path) -> Path:
    """The wiki's catalogues (French, German) compiled into ``directory``, as `pybabel
    compile` does."""
    for source in WIKI_TRANSLATIONS.glob("*/LC_MESSAGES/messages.po"):
        language = source.parent.parent.name
        target = directory / language / "LC_MESSAGES" / "messages.mo"
        target.parent.mkdir(parents=True)
        with open(source, "rb") as po, open(target, "wb") as mo:
            write_mo(mo, read_po(po, locale=language))
    return directory


def wiki_catalogue(tmp_path) -> dict:
    """The wiki lists its own translations directory beside Flask-Babel's default, as a
    host does; wikinotify adds its catalogue after them."""
    catalogue = compiled_catalogue(tmp_path / "translations")
    return {"BABEL_TRANSLATION_DIRECTORIES": f"translations;{catalogue}"}


# The site-wide webhooks' receiver is on 127.0.0.1, which the SSRF guard lets through only
# when told to.
pytestmark = pytest.mark.app_config(wiki_catalogue, smtp=True,
                                    WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])


@pytest.fixture
def category(request):
    """The wiki's category as it registers it; ``told_to_anyone`` (indirect) the same
    declaring that its entries, about no page, may be told to anyone."""
    category = custom_category.category
    if getattr(request, "param", None) == "told_to_anyone":
        category = dataclasses.replace(category, told_to_anyone=True)
    return category


@pytest.fixture
def ctx(app, category):
    """The wiki registers its category in its factory, after ``init_app``; its
    administrators admin, carol and bob hold ``manage:system``."""
    notify.register_category(category, app=app)
    with app.app_context():
        set_delay(0)
        holders = [user(name) for name in ("admin", "carol", "bob")]
        for holder in holders:
            holder.is_admin = True
        db.session.add(Group(name="Sysadmins", permissions=["manage:system"], members=holders))
        db.session.commit()
        yield app


def sync_failed(target: str = "github", title: str = "GitHub backup", by: str = "bob"):
    """What the wiki's storage module does when a target goes from healthy to failing."""
    event_id = notify.emit("storage:syncFailed", site_id=None, actor_id=user(by).id,
                           snapshot={"title": title}, target_id=target)
    db.session.commit()
    return event_id


def test_a_sync_failure_tells_the_permission_holders_but_the_actor(ctx, smtp):
    assert sync_failed() is not None
    run_jobs(ctx)
    [entry] = entries_for("admin")
    assert (entry.category, entry.group_key, entry.count) == (
        "storageSyncFailed", "storageSyncFailed:github", 1)
    assert entry.site_id is None  # instance-scoped: shown on every site
    assert len(entries_for("carol")) == 1
    assert entries_for("bob") == []  # the actor, though he holds the permission
    assert entries_for("alice") == [] and entries_for("dave") == []  # they do not

    messages = {m["To"]: m for m in smtp.inbox.messages}
    assert sorted(messages) == ["admin@example.com", "carol@example.com"]
    assert messages["admin@example.com"]["Subject"] == "[Main wiki] Syncing to GitHub backup failed"
    # carol reads French: the wiki's own catalogue translates its category's sentence.
    french = messages["carol@example.com"]
    assert french["Subject"] == "[Main wiki] La synchronisation vers GitHub backup a échoué"
    text = french.get_body(("plain",)).get_content()
    assert "La synchronisation vers GitHub backup a échoué" in text
    # No page to open: the mail links to the inbox.
    assert "http://localhost:5000/_notifications/inbox" in text


def test_repeated_failures_of_one_target_coalesce_into_one_unread_entry(ctx, smtp):
    sync_failed()
    run_jobs(ctx)
    [first] = entries_for("admin")
    sync_failed()
    sync_failed(target="s3", title="S3 archive")
    run_jobs(ctx)
    entries = entries_for("admin")
    assert [(e.id == first.id, e.group_key, e.count) for e in entries] == [
        (True, "storageSyncFailed:github", 2),
        (False, "storageSyncFailed:s3", 1),
    ]
    # Quiet until read (docs/rules.md#mail-cadence): the coalesced failure sends no second mail.
    subjects = [m["Subject"] for m in smtp.inbox.messages if m["To"] == "admin@example.com"]
    assert subjects == ["[Main wiki] Syncing to GitHub backup failed",
                        "[Main wiki] Syncing to S3 archive failed"]


def test_the_entry_is_in_the_inbox_on_every_site(ctx, client):
    sync_failed()
    sync_failed()
    run_jobs(ctx)
    login(client, "admin")
    for site in ("http://localhost", "http://docs.localhost"):
        [item] = client.get(API, base_url=site).get_json()["items"]
        assert item["category"] == "storageSyncFailed"
        assert item["text"] == "Syncing to GitHub backup failed 2 times"
        assert (item["page"], item["url"], item["available"]) == (None, None, True)
    html = client.get(INBOX).get_data(as_text=True)
    assert "Syncing to GitHub backup failed 2 times" in html
    assert 'href="None"' not in html


def test_the_inbox_page_speaks_the_readers_language(ctx, client):
    sync_failed()
    run_jobs(ctx)
    login(client, "carol")
    html = client.get(INBOX).get_data(as_text=True)
    assert "La synchronisation vers GitHub backup a échoué" in html


def test_the_category_is_on_administrators_preferences_only(ctx, client):
    login(client, "admin")
    keys = [c["key"] for c in client.get(PREFERENCES_API).get_json()["categories"]]
    assert keys[-1] == "storageSyncFailed"
    assert "Storage sync failures" in client.get(PREFERENCES).get_data(as_text=True)
    client.post("/logout")

    login(client, "alice")
    keys = [c["key"] for c in client.get(PREFERENCES_API).get_json()["categories"]]
    assert "storageSyncFailed" not in keys and "watchedPage" in keys
    assert "Storage sync failures" not in client.get(PREFERENCES).get_data(as_text=True)
    on = {"storageSyncFailed": {"inApp": True, "email": True}}
    response = client.put(PREFERENCES_API, json=preference_map(client, **on))
    assert response.status_code == 400  # not hers to set


def preference_map(client, **changes) -> dict:
    """The caller's whole map from GET, with ``changes``: PUT takes every category."""
    body = client.get(PREFERENCES_API).get_json()
    categories = {c["key"]: {"inApp": c["inApp"], "email": c["email"]} for c in body["categories"]}
    return {"categories": {**categories, **changes}}


def test_turning_it_off_is_honoured_by_the_fan_out(ctx, client):
    login(client, "admin")
    off = {"storageSyncFailed": {"inApp": False, "email": False}}
    response = client.put(PREFERENCES_API, json=preference_map(client, **off))
    assert response.status_code == 200, response.get_json()
    sync_failed()
    run_jobs(ctx)
    assert entries_for("admin") == []
    assert len(entries_for("carol")) == 1


def test_an_unknown_kind_is_dropped_with_a_warning_naming_it(ctx, caplog):
    caplog.set_level(logging.WARNING, logger="wikinotify.emit")
    assert notify.emit("storage:syncFialed", site_id=None, snapshot={"title": "x"}) is None
    db.session.commit()
    assert "unknown event kind 'storage:syncFialed'" in caplog.text
    assert events() == []


def test_the_kind_is_known_only_where_a_category_listens_to_it(app, caplog):
    """On a wiki that did not register the category, its kind is unknown."""
    with app.app_context():
        assert notify.emit("storage:syncFailed", site_id=None) is None
    assert "unknown event kind 'storage:syncFailed'" in caplog.text


def test_a_malformed_kind_is_refused_at_start_up_naming_it(app):
    malformed = dataclasses.replace(custom_category.category,
                                    events=frozenset({"storage sync failed"}))
    with pytest.raises(CategoryError, match="malformed event kind 'storage sync failed'"):
        notify.register_category(malformed, app=app)
    assert "storageSyncFailed" not in state(app).registry


def test_a_category_whose_strings_the_wiki_has_not_translated_is_refused(app):
    untranslated = dataclasses.replace(custom_category.category, title=N_("Backups"))
    with pytest.raises(CategoryError, match="'storageSyncFailed' has no 'fr' translation "
                                            "for 'Backups'"):
        notify.register_category(untranslated, app=app)


def test_a_category_that_does_not_say_whether_anyone_may_hear_of_it_is_refused(app):
    """"Anyone may see it" is a decision: a category left undecided (as one written
    without the field is) cannot start."""
    undecided = dataclasses.replace(custom_category.category, told_to_anyone=None)
    with pytest.raises(CategoryError, match="'storageSyncFailed' must say whether its "
                                            "entries may be told to anyone: set "
                                            "told_to_anyone"):
        notify.register_category(undecided, app=app)
    assert "storageSyncFailed" not in state(app).registry


# -- site-wide webhooks: told of an entry about no page only when its category says so --------


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


def site_webhook(url: str) -> tuple[int, str]:
    """An administrator's active site-wide webhook taking the category; its id and secret."""
    secret = standard_webhooks.new_secret()
    endpoint = Endpoint(kind="webhook", owner_id=None, url=url,
                        categories=["storageSyncFailed"], secret_encrypted=secrets_box.seal(secret),
                        state="active", verified_at=utcnow())
    db.session.add(endpoint)
    db.session.commit()
    return endpoint.id, secret


def deliveries_of(endpoint_id: int) -> list[Delivery]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(Delivery).where(Delivery.endpoint_id == endpoint_id)))


def test_a_site_wide_webhook_hears_nothing_of_a_category_kept_to_its_readers(ctx, receiver):
    assert custom_category.category.told_to_anyone is False
    endpoint_id, _ = site_webhook(receiver.url("/site"))
    sync_failed()
    run_jobs(ctx)
    assert len(entries_for("admin")) == 1  # its own readers are told, and see it
    assert deliveries_of(endpoint_id) == []
    assert receiver.requests == []


@pytest.mark.parametrize("category", ["told_to_anyone"], indirect=True)
def test_a_site_wide_webhook_hears_of_a_category_that_may_be_told_to_anyone(ctx, receiver):
    endpoint_id, secret = site_webhook(receiver.url("/site"))
    sync_failed()
    run_jobs(ctx)
    (request,) = receiver.at("/site")
    headers = {name.lower(): value for name, value in request.headers.items()}
    payload = Webhook(secret).verify(request.body, headers)
    assert payload["type"] == "storageSyncFailed"
    data = payload["data"]
    assert (data["text"], data["page"], data["url"]) == (
        "Syncing to GitHub backup failed", None, None)
    (row,) = deliveries_of(endpoint_id)
    assert row.state == "delivered"


@pytest.mark.parametrize("category", ["told_to_anyone"], indirect=True)
def test_a_category_kept_to_its_readers_since_the_fan_out_is_not_sent_site_wide(
    ctx, category, receiver
):
    from wikinotify.jobs import dispatch

    endpoint_id, _ = site_webhook(receiver.url("/site"))
    sync_failed()
    dispatch()
    (row,) = deliveries_of(endpoint_id)
    assert row.state == "pending"
    # The wiki is deployed again with the category kept to its readers.
    st = state(ctx)
    kept = Registry(dataclasses.replace(c, told_to_anyone=False) if c.key == category.key
                    else c for c in st.registry.values())
    ctx.extensions["wikinotify"] = dataclasses.replace(st, registry=kept)
    run_jobs(ctx)
    (row,) = deliveries_of(endpoint_id)
    assert (row.state, row.error) == ("ineligible", "its category is no longer told to anyone")
    assert receiver.requests == []


class HostWithoutPermissions(DemoHost):
    """A wiki that never implemented the lookup (the Host default)."""

    accounts_with_permission = Host.accounts_with_permission


def test_a_host_without_the_lookup_fails_the_event_naming_the_category(ctx):
    ctx.extensions["wikinotify"] = dataclasses.replace(state(ctx), host=HostWithoutPermissions())
    sync_failed()
    run_jobs(ctx)
    [event] = events()
    assert event.processed_at is None and event.attempts == 1
    assert event.error.startswith("NotImplementedError: notification category "
                                  "'storageSyncFailed': HostWithoutPermissions does not "
                                  "implement Host.accounts_with_permission")


# -- the site an instance-scoped mail goes out with (docs/rules.md#the-mail-run) -------------

MAIN = "http://localhost:5000"
DOCS = "http://docs.localhost:5000"


def docs_site() -> Site:
    return db.session.scalar(sa.select(Site).where(Site.hostname == "docs.localhost"))


def sign_in_on(client, username: str, base_url: str) -> None:
    """Sign in through the demo's login form on the site at ``base_url``, then out."""
    response = client.post("/login", data={"username": username, "password": "password"},
                           base_url=base_url)
    assert response.status_code == 302, f"could not sign in as {username}"
    client.post("/logout", base_url=base_url)


def mail_to(smtp, username: str):
    [message] = [m for m in smtp.inbox.messages if m["To"] == f"{username}@example.com"]
    return message


def test_instance_mail_goes_out_with_the_site_the_reader_last_signed_in_on(ctx, client, smtp):
    docs = docs_site()
    docs.primary_locale = "fr"  # admin sets no language: the site's is the one he reads
    db.session.commit()
    sign_in_on(client, "admin", "http://docs.localhost")
    assert user("admin").last_site_id == docs.id
    sync_failed()
    run_jobs(ctx)

    message = mail_to(smtp, "admin")
    assert message["Subject"] == "[Docs] La synchronisation vers GitHub backup a échoué"
    assert message["List-Unsubscribe"].startswith(f"<{DOCS}/_notifications/unsubscribe?t=")
    text = message.get_body(("plain",)).get_content()
    assert f"{DOCS}/_notifications/inbox" in text and MAIN not in text

    # carol never signed in: the first site, its title and its links.
    assert user("carol").last_site_id is None
    message = mail_to(smtp, "carol")
    assert message["Subject"] == "[Main wiki] La synchronisation vers GitHub backup a échoué"
    assert message["List-Unsubscribe"].startswith(f"<{MAIN}/_notifications/unsubscribe?t=")
    text = message.get_body(("plain",)).get_content()
    assert f"{MAIN}/_notifications/inbox" in text and DOCS not in text


def test_the_last_sign_in_counts_and_a_site_gone_since_falls_back_to_the_first(ctx, client,
                                                                              smtp):
    sign_in_on(client, "admin", "http://docs.localhost")
    sign_in_on(client, "admin", "http://localhost")
    sign_in_on(client, "carol", "http://docs.localhost")
    assert user("admin").last_site_id != docs_site().id
    ctx.extensions["wikinotify"] = dataclasses.replace(
        state(ctx), host=HostWithLastSites({str(user("carol").id): "999"}))  # no such site
    sync_failed()
    run_jobs(ctx)
    assert mail_to(smtp, "admin")["Subject"].startswith("[Main wiki] ")
    assert mail_to(smtp, "carol")["Subject"].startswith("[Main wiki] ")


class HostWithLastSites(DemoHost):
    """The demo's answer, with some readers' sites set by the test, and each call kept."""

    def __init__(self, override: dict[str, str] | None = None) -> None:
        super().__init__()
        self.override = override or {}
        self.asked: list[list[str]] = []

    def last_site_id(self, user_ids):
        self.asked.append(list(user_ids))
        return {**super().last_site_id(user_ids), **self.override}


def test_the_drain_asks_for_every_readers_site_at_once(ctx, client, smtp):
    sign_in_on(client, "admin", "http://docs.localhost")
    sign_in_on(client, "carol", "http://docs.localhost")
    host = HostWithLastSites()
    ctx.extensions["wikinotify"] = dataclasses.replace(state(ctx), host=host)
    sync_failed()
    run_jobs(ctx)
    assert host.asked == [sorted([str(user("admin").id), str(user("carol").id)])]
    assert [mail_to(smtp, name)["Subject"][:6] for name in ("admin", "carol")] == ["[Docs]"] * 2


class HostWithoutSignIns(DemoHost):
    """A wiki that does not record sign-ins (the Host default)."""

    last_site_id = Host.last_site_id


def test_a_host_without_sign_ins_mails_from_the_first_site(ctx, client, smtp):
    sign_in_on(client, "admin", "http://docs.localhost")
    host = HostWithoutSignIns()
    assert host.last_site_id([str(user("admin").id)]) == {}
    ctx.extensions["wikinotify"] = dataclasses.replace(state(ctx), host=host)
    sync_failed()
    run_jobs(ctx)
    message = mail_to(smtp, "admin")
    assert message["Subject"] == "[Main wiki] Syncing to GitHub backup failed"
    assert message["List-Unsubscribe"].startswith(f"<{MAIN}/_notifications/unsubscribe?t=")
