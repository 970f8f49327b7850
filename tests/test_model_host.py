"""``ModelHost``, the host a wiki names instead of writing (docs/adopting.md#the-model-host),
on two layouts, each on SQLite and PostgreSQL: the example wiki's (integer keys, ``name``,
``slug``, ``Watch``, an ``is_admin`` column, no groups) through its own routes, and a second
one (a native UUID account key and a string page key, ``username``, a ``Subscription`` table
with other column names, a soft delete, a confirmed flag, a language, teams and an access
rule, an admin role). Key types: ids a key cannot hold name nothing and fail no
statement, a watch table's text user column beside an integer key, a UUID stored as hex,
an ``active`` column read by default, a key type it cannot read refused. The one-site
default: its site from the settings, ``emit`` without a ``site_id``, and start-up refusing
a one-site host without ``WIKINOTIFY_SITE_URL``."""

from __future__ import annotations

import logging
import os
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from werkzeug.security import generate_password_hash

from tests.helpers.app import ROOT
from tests.helpers.database import statements_sent
from tests.helpers.jobs import run_jobs
from tests.helpers.memory_host import MemoryHost, memory_app
from wikinotify import ONE_SITE_ID, ConfigError, ModelHost, SiteFacts, WikiNotify
from wikinotify.model_host import ACCOUNTS_GROUP
from wikinotify.models import Base as WikiNotifyBase
from wikinotify.models import Event, Notification
from wikinotify.state import state

EXAMPLE = os.path.join(ROOT, "examples", "minimal_wiki")

# -- the second layout ---------------------------------------------------------------------


class Base(DeclarativeBase):
    metadata = sa.MetaData()


class Account(Base):
    __tablename__ = "mh_accounts"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    username: Mapped[str] = mapped_column(sa.String(80), unique=True)
    mail: Mapped[str | None] = mapped_column(sa.String(200))
    confirmed: Mapped[bool] = mapped_column(default=True)
    deleted_at: Mapped[datetime | None]
    language: Mapped[str | None] = mapped_column(sa.String(10))
    role: Mapped[str] = mapped_column(sa.String(20), default="reader")


class Article(Base):
    __tablename__ = "mh_articles"
    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True,
                                    default=lambda: str(uuid.uuid4()))
    headline: Mapped[str] = mapped_column(sa.String(200))
    route: Mapped[str] = mapped_column(sa.String(200))


class Subscription(Base):
    __tablename__ = "mh_subscriptions"
    subscriber_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("mh_accounts.id"),
                                                     primary_key=True)
    article_id: Mapped[str] = mapped_column(sa.ForeignKey("mh_articles.id"), primary_key=True)


team_members = sa.Table(
    "mh_team_members", Base.metadata,
    sa.Column("account_id", sa.ForeignKey("mh_accounts.id"), primary_key=True),
    sa.Column("team", sa.String(40), primary_key=True),
)


def staff_read_internal(group_ids: frozenset[str], permission: str, page) -> bool:
    """Everyone reads the wiki but ``internal/``, which the staff team alone reads."""
    return "staff" in group_ids or not str(page.get("path")).startswith("internal/")


def article_url(page, section: str | None) -> str:
    return f"/a/{page['path']}" + ("/talk" if section == "comments" else "")


def second_host() -> ModelHost:
    return ModelHost(
        user=Account, page=Article, watch=Subscription, page_url=article_url,
        user_name="username", user_email=Account.mail, user_verified=Account.confirmed,
        user_active=Account.deleted_at.is_(None), user_locale=Account.language,
        page_title=Article.headline, page_path="route",
        watch_user=Subscription.subscriber_id, watch_page=Subscription.article_id,
        admin=Account.role == "admin",
        groups=(team_members.c.account_id, team_members.c.team),
        check_access=staff_read_internal,
    )


def model_app(host, database_url: str, metadata: sa.MetaData, **config) -> Flask:
    """A Flask app of the wiki's models (their tables emptied) and wikinotify on ``host``."""
    app = Flask("model_wiki")
    app.config.update({"TESTING": True, "SECRET_KEY": "test-secret",
                       "SQLALCHEMY_DATABASE_URI": database_url,
                       "WIKINOTIFY_SITE_URL": "https://wiki.example", **config})
    db = SQLAlchemy()
    db.init_app(app)
    WikiNotify(app, host=host)
    with app.app_context():
        _fresh_tables(db.engine, metadata)
    return app


def _fresh_tables(engine: sa.Engine, metadata: sa.MetaData) -> None:
    """wikinotify's tables and the wiki's, the wiki's emptied (on PostgreSQL the schema
    outlives a test; wikinotify's are emptied by the database fixture)."""
    WikiNotifyBase.metadata.create_all(engine)
    metadata.create_all(engine)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":  # ids from 1 again, as a new SQLite file's
            names = ", ".join(map(engine.dialect.identifier_preparer.format_table,
                                  metadata.sorted_tables))
            conn.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY CASCADE")


@pytest.fixture
def wiki(database_url, redis_url, queue_name):
    """The second layout: ann, bob (staff), cy (deleted), dee (unconfirmed), root (admin);
    a public article and an internal one."""
    app = model_app(second_host(), database_url, Base.metadata, WIKINOTIFY_REDIS_URL=redis_url,
                    WIKINOTIFY_QUEUE=queue_name, WIKINOTIFY_MAIL_ENABLED=True,
                    MAIL_DEFAULT_SENDER="wiki@wiki.example")
    with app.app_context():
        session = state().db.session
        people = {name: Account(username=name, mail=f"{name}@wiki.example", language="fr")
                  for name in ("ann", "bob", "cy", "dee", "root")}
        people["cy"].deleted_at = datetime.now(UTC)
        people["dee"].confirmed = False
        people["root"].role = "admin"
        session.add_all(people.values())
        session.add_all([Article(id="guide", headline="Guide", route="guide/start"),
                         Article(id="ops", headline="Runbook", route="internal/runbook")])
        session.flush()
        session.execute(team_members.insert(), [{"account_id": people["bob"].id, "team": "staff"},
                                                {"account_id": people["bob"].id, "team": "ops"}])
        session.commit()
        app.config["people"] = {name: str(p.id) for name, p in people.items()}
        yield app
        session.remove()
        state().db.engine.dispose()


def ids(app) -> dict[str, str]:
    return app.config["people"]


def subscribe(app, article_id: str, *names: str) -> None:
    session = state().db.session
    session.add_all(Subscription(subscriber_id=uuid.UUID(ids(app)[n]), article_id=article_id)
                    for n in names)
    session.commit()


# -- the second layout ---------------------------------------------------------------------


def test_watchers_are_keyset_paginated_in_the_uuid_keys_own_order(wiki):
    subscribe(wiki, "guide", "ann", "bob", "cy", "dee", "root")
    host = state().host
    expected = sorted(ids(wiki).values(), key=uuid.UUID)  # the key's order, not the text's
    pages, after = [], None
    while batch := host.page_watchers("guide", after=after, limit=2):
        pages.append(batch)
        after = batch[-1]
    assert pages == [expected[:2], expected[2:4], expected[4:]]
    assert host.page_watchers("no-such-article", after=None, limit=10) == []


def test_an_announcements_audience_is_every_account_or_a_teams_members_keyset(wiki):
    host, people = state().host, ids(wiki)
    everyone, after = [], None
    while batch := host.announcement_audience("main", None, after=after, limit=2):
        assert len(batch) <= 2
        everyone += batch
        after = batch[-1]
    # Every account, in the key's own order: wikinotify sorts out who may be told.
    assert everyone == sorted(people.values(), key=uuid.UUID)
    assert host.announcement_audience("main", frozenset({"ops", "staff"}), after=None,
                                      limit=10) == [people["bob"]]  # in two teams: once
    assert host.announcement_audience("main", frozenset({"nobody"}), after=None,
                                      limit=10) == []
    assert host.announcement_groups() == [("ops", "ops"), ("staff", "staff")]


def test_accounts_come_in_one_query_with_their_teams_and_flags(wiki):
    host, people = state().host, ids(wiki)
    strangers = [str(uuid.uuid4()) for _ in range(4995)]  # a fan-out's batch is 5,000
    with statements_sent(state().db.engine) as statements:
        facts = host.users([*people.values(), *strangers, "not-a-uuid", ""])
    [(_, parameters)] = statements
    assert len(parameters) == 1  # the ids as one JSON text, not 5,000 bind parameters
    assert set(facts) == set(people.values())  # names nothing: left out, no error
    bob, cy, dee = (facts[people[n]] for n in ("bob", "cy", "dee"))
    assert (bob.display_name, bob.email, bob.locale) == ("bob", "bob@wiki.example", "fr")
    assert bob.group_ids == {"staff", "ops"} and facts[people["ann"]].group_ids == frozenset()
    assert (cy.active, cy.can_receive) == (False, False)  # soft-deleted
    assert (dee.verified, dee.can_receive_email) == (False, False)
    # Whether they are active, which every open stream asks: the same answer, the
    # accounts' rows alone.
    with statements_sent(state().db.engine) as statements:
        active = host.active_users([*people.values(), *strangers, "not-a-uuid", ""])
    assert active == {one for one, said in facts.items() if said.active}
    [(statement, _)] = statements
    assert people["cy"] not in active and team_members.name not in statement
    # A malformed id sent no statement the database refused: the transaction goes on.
    assert state().db.session.scalar(sa.select(sa.func.count()).select_from(Account)) == 5


def test_pages_come_in_one_query_as_a_snapshot_of_the_one_site(wiki):
    host = state().host
    with statements_sent(state().db.engine) as statements:
        found = host.pages(["guide", "ops", "gone"])
    assert len(statements) == 1
    assert found == {
        "guide": {"id": "guide", "site_id": ONE_SITE_ID, "path": "guide/start", "title": "Guide"},
        "ops": {"id": "ops", "site_id": "main", "path": "internal/runbook", "title": "Runbook"},
    }
    article = state().db.session.get(Article, "guide")
    assert host.snapshot(article) == found["guide"]  # what emit stores, without a query
    assert (host.page_exists("guide"), host.page_exists("gone")) == (True, False)
    assert host.page_url(found["ops"]) == "/a/internal/runbook"
    assert host.comment_url(found["ops"], "7") == "/a/internal/runbook/talk#comment-7"


def test_access_and_administrators_are_the_wikis_rules(wiki):
    host, people = state().host, ids(wiki)
    runbook = host.pages(["ops"])["ops"]
    bob, ann = (host.user(people[n]) for n in ("bob", "ann"))
    assert host.check_access(bob.group_ids, "read:pages", runbook)
    assert not host.check_access(ann.group_ids, "read:pages", runbook)
    assert [host.is_admin(people[n]) for n in ("root", "ann")] == [True, False]
    assert not host.is_admin("not-a-uuid") and not host.is_admin(str(uuid.uuid4()))


def test_a_uuid_id_is_named_one_way_only(wiki):
    host, root = state().host, ids(wiki)["root"]
    aliases = [root.upper(), f"{{{root}}}", f"urn:uuid:{root}", root.replace("-", "")]
    assert host.users(aliases) == {} and not any(map(host.is_admin, aliases))
    assert host.is_admin(root)


def test_an_over_long_or_unstorable_string_id_names_nothing(wiki):
    session, host = state().db.session, state().host
    long_id = "a" * 36  # as long as the key's VARCHAR(36)
    session.add(Article(id=long_id, headline="Long", route="long"))
    session.commit()
    others = [long_id + "X", "guide\x00", "gu\x00ide"]  # PostgreSQL text holds no NUL
    assert host.pages(others) == {} and not any(map(host.page_exists, others))
    assert host.page_watchers(long_id + "X", after=None, limit=5) == []
    assert set(host.pages([long_id, "guide"])) == {long_id, "guide"}  # still usable


def test_a_fan_out_tells_who_may_read_and_receive_and_never_the_actor(wiki):
    people = ids(wiki)
    subscribe(wiki, "ops", "ann", "bob", "cy", "dee")
    subscribe(wiki, "guide", "ann", "bob", "cy", "dee")
    host, session = state().host, state().db.session
    for article_id in ("ops", "guide"):  # a one-site wiki names no site
        article = session.get(Article, article_id)
        WikiNotify.emit("page:edit", actor_id=people["ann"], page_id=article.id,
                        snapshot=host.snapshot(article), variant="edited")
    session.commit()
    assert {e.site_id for e in session.scalars(sa.select(Event))} == {ONE_SITE_ID}
    run_jobs(wiki)
    session.expire_all()
    told = {(e.user_id, e.page_id, e.email_state == "pending")
            for e in session.scalars(sa.select(Notification))}
    assert told == {
        (people["bob"], "ops", True),    # staff reads internal/
        (people["bob"], "guide", True),
        (people["dee"], "guide", False),  # unconfirmed: in-app, never mail
    }  # ann acted; cy is deleted; ann and dee may not read internal/


def test_a_deleted_article_tells_its_subscribers_captured_before_it_goes(wiki):
    people = ids(wiki)
    subscribe(wiki, "guide", "bob", "dee")
    session = state().db.session
    article = session.get(Article, "guide")
    WikiNotify.emit("page:delete", actor_id=people["root"], page_id=article.id,
                    snapshot=state().host.snapshot(article), variant="deleted")
    session.execute(sa.delete(Subscription).where(Subscription.article_id == "guide"))
    session.delete(article)
    session.commit()
    [event] = session.scalars(sa.select(Event))
    assert sorted(event.recipients) == sorted([people["bob"], people["dee"]])
    run_jobs(wiki)
    session.expire_all()
    assert sorted(e.user_id for e in session.scalars(sa.select(Notification))) == sorted(
        [people["bob"], people["dee"]])


def test_a_wiki_with_groups_must_say_who_reads_what_and_a_missing_column_is_named():
    with pytest.raises(ConfigError, match="check_access="):
        ModelHost(user=Account, page=Article, watch=Subscription, page_url="/{path}",
                  groups=(team_members.c.account_id, team_members.c.team))
    with pytest.raises(ConfigError, match="Account has no column 'nickname'; name the one "
                                          "to read with user_name="):
        ModelHost(user=Account, page=Article, watch=Subscription, page_url="/{path}",
                  user_name="nickname")
    with pytest.raises(ConfigError, match=r"page_url '/\{lang\}/\{path\}' may name "
                                          r"\{path\} and \{id\} only"):
        ModelHost(user=Account, page=Article, watch=Subscription, page_url="/{lang}/{path}")
    with pytest.raises(ConfigError, match="mh_team_members has no column 'user_id'; name the "
                                          "one to read with watch_user="):
        ModelHost(user=Account, page=Article, watch=team_members, page_url="/{path}",
                  user_name="username", user_email="mail", page_title="headline",
                  page_path="route")
    with pytest.raises(ConfigError, match="Article has no column 'path' or 'slug'; name the "
                                          "one to read with page_path="):
        ModelHost(user=Account, page=Article, watch=Subscription, page_url="/{path}",
                  user_name="username", user_email="mail", page_title="headline")


# -- key types ------------------------------------------------------------------------------


class Member(Base):
    """An integer account key whose watches keep it as text, some of them NULL."""
    __tablename__ = "mh_members"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(40))
    email: Mapped[str | None] = mapped_column(sa.String(200))
    active: Mapped[bool] = mapped_column(default=True)


follows = sa.Table(
    "mh_follows", Base.metadata,
    sa.Column("member", sa.String(20), nullable=True),
    sa.Column("article", sa.String(36)),
)


class Visitor(Base):
    """A UUID key stored as 32 hex digits on PostgreSQL too (``CHAR(32)``)."""
    __tablename__ = "mh_visitors"
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(native_uuid=False), primary_key=True,
                                          default=uuid.uuid4)
    name: Mapped[str] = mapped_column(sa.String(40))
    email: Mapped[str | None] = mapped_column(sa.String(200))


class GUID(sa.TypeDecorator[uuid.UUID]):
    """A hand-made UUID type, as wikis wrote before ``sa.Uuid``."""
    impl = sa.CHAR(32)
    cache_ok = True


class Legacy(Base):
    __tablename__ = "mh_legacy"
    id: Mapped[uuid.UUID] = mapped_column(GUID, primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(40))
    email: Mapped[str | None] = mapped_column(sa.String(200))


def member_host(user=Member) -> ModelHost:
    return ModelHost(user=user, page=Article, watch=follows, page_url="/{path}",
                     page_title="headline", page_path="route", watch_user="member",
                     watch_page="article")


@pytest.fixture
def members(database_url):
    app = model_app(member_host(), database_url, Base.metadata)
    with app.app_context():
        yield app
        state().db.session.remove()
        state().db.engine.dispose()


def test_watchers_page_in_the_watch_columns_own_type_and_never_as_none(members):
    session, host = state().db.session, state().host
    session.add(Article(id="guide", headline="Guide", route="guide"))
    session.execute(follows.insert(), [{"member": m, "article": "guide"}
                                       for m in ("1", "2", "10", "07", None)])
    session.commit()
    pages, after = [], None
    while batch := host.page_watchers("guide", after=after, limit=2):
        pages.append(batch)
        after = batch[-1]
    assert pages == [["07", "1"], ["10", "2"]]  # the text column's order; NULL is no one
    assert None not in session.scalars(host.watchers_query("guide")).all()


def test_without_groups_every_account_is_in_the_one_group_announcements_name(members):
    session, host = state().db.session, state().host
    session.add_all(Member(id=n, name=f"m{n}") for n in (2, 10, 1))
    session.commit()
    assert host.announcement_groups() == [(ACCOUNTS_GROUP, ACCOUNTS_GROUP)]
    everyone = host.announcement_audience("main", None, after=None, limit=100)
    assert everyone == ["1", "2", "10"]  # the integer key's order
    assert host.announcement_audience("main", None, after="2", limit=100) == ["10"]
    assert host.announcement_audience("main", frozenset({ACCOUNTS_GROUP}), after=None,
                                      limit=100) == everyone
    assert host.announcement_audience("main", frozenset({"ops"}), after=None, limit=9) == []


def test_an_account_switched_off_by_an_active_column_is_inactive(members):
    session, host = state().db.session, state().host
    session.add_all([Member(id=1, name="on"), Member(id=2, name="off", active=False)])
    session.commit()
    facts = host.users(["1", "2"])
    assert (facts["1"].active, facts["2"].active) == (True, False)
    assert host.active_users(["1", "2", "3"]) == {"1"}


def test_a_uuid_key_stored_as_hex_is_found_on_either_database(database_url):
    app = model_app(member_host(Visitor), database_url, Base.metadata)
    with app.app_context():
        session, host = state().db.session, state().host
        visitor = Visitor(name="vi")
        session.add(visitor)
        session.commit()
        assert set(host.users([str(visitor.id), visitor.id.hex])) == {str(visitor.id)}
        # No active column: every account is active.
        assert host.active_users([str(visitor.id), visitor.id.hex]) == {str(visitor.id)}
        session.remove()
        state().db.engine.dispose()


def test_a_key_of_a_type_it_cannot_read_is_refused_at_start_up():
    with pytest.raises(ConfigError, match=r"mh_legacy.id is a GUID; ModelHost reads "
                                          r"integer, string and UUID \(sa.Uuid\) keys"):
        member_host(Legacy)


# -- the example wiki's layout, through its own routes ---------------------------------------


@pytest.fixture
def example(database_url, redis_url, queue_name, monkeypatch):
    """examples/minimal_wiki as it runs, configured from the environment as its README
    says, its tables built (wikinotify's too) and emptied."""
    monkeypatch.syspath_prepend(EXAMPLE)
    settings = {"SQLALCHEMY_DATABASE_URI": database_url, "SECRET_KEY": "test-secret",
                "WIKINOTIFY_REDIS_URL": redis_url, "WIKINOTIFY_QUEUE": queue_name,
                "WTF_CSRF_ENABLED": "false"}
    for key, value in settings.items():
        monkeypatch.setenv(f"FLASK_{key}", value)
    from minimal_wiki import create_app
    from minimal_wiki.models import User, db

    app = create_app()
    with app.app_context():
        _fresh_tables(db.engine, db.metadata)
        hashed = generate_password_hash("pw", method="pbkdf2:sha256:1000")
        db.session.add_all(User(name=name, email=f"{name}@example.org", password_hash=hashed,
                                is_admin=name == "root") for name in
                           ("alice", "bob", "root", *(f"reader{n}" for n in range(4, 12))))
        db.session.commit()
        db.session.remove()
    # No app context held: Flask-Login keeps the signed-in account on it, and each
    # client's request must load its own.
    yield app
    with app.app_context():
        db.engine.dispose()


def signed_in(app, name: str):
    client = app.test_client()
    assert client.post("/login", data={"name": name, "password": "pw"}).status_code == 302
    return client


def test_the_example_pages_its_integer_watchers_in_number_order(example):
    bob = signed_in(example, "bob")
    assert bob.post("/pages/home", data={"title": "Home", "text": "Hi"}).status_code == 302
    for user_id in (2, 9, 10, 11):  # 10 sorts before 9 as text: the key's type decides
        signed_in(example, f"reader{user_id}" if user_id > 3 else "bob").post(
            "/pages/home/watch")
    with example.app_context():
        assert_the_example_host_reads_its_models(state().host)


def assert_the_example_host_reads_its_models(host) -> None:
    page_id = host.pages(["1"])["1"]["id"]
    assert host.page_watchers(page_id, after=None, limit=2) == ["2", "9"]
    assert host.page_watchers(page_id, after="9", limit=2) == ["10", "11"]
    # Ids an integer key cannot hold name nothing, and cost no refused statement: an
    # integer column's key is int4 on PostgreSQL, so 3000000000 is no id of this wiki.
    malformed = ["07", "1.0", "x", "9" * 30, "-1", "--5", "-0", "+5", " 5", "5\n", "٥",
                 "3000000000", "-2147483649"]
    assert host.users(malformed) == {}
    assert host.pages(malformed) == {}
    assert not any(host.is_admin(i) or host.page_exists(i) for i in malformed)
    assert host.page_watchers("3000000000", after=None, limit=2) == []
    assert [host.is_admin(i) for i in ("3", "1")] == [True, False]
    assert set(host.pages(["1"])) == {"1"}  # no statement failed: the transaction goes on
    facts = host.users(["1", "2"])
    assert (facts["1"].display_name, facts["1"].email) == ("alice", "alice@example.org")
    assert facts["2"].group_ids == {ACCOUNTS_GROUP}  # no groups: every account reads
    page = host.pages([page_id])[page_id]
    assert host.check_access(facts["2"].group_ids, "read:pages", page)
    assert not host.check_access(frozenset(), "read:pages", page)  # a guest: not told


def test_muting_an_id_the_key_cannot_hold_is_not_found_and_the_wiki_goes_on(example):
    alice = signed_in(example, "alice")
    for target in ("--5", "3000000000", "07"):
        answer = alice.put("/_notifications/api/mutes", json={"kind": "user", "id": target})
        assert answer.status_code == 404, (target, answer.status_code)
    assert alice.put("/_notifications/api/mutes",
                     json={"kind": "user", "id": "2"}).status_code == 204


def test_the_example_tells_a_watcher_through_its_own_routes(example):
    bob, alice = signed_in(example, "bob"), signed_in(example, "alice")
    bob.post("/pages/home", data={"title": "Home", "text": "Hi"})
    alice.post("/pages/home/watch")
    bob.post("/pages/home", data={"title": "Home", "text": "Hi again"})
    run_jobs(example)
    [entry] = alice.get("/_notifications/api/notifications").get_json()["items"]
    assert (entry["category"], entry["url"], entry["actor"]["name"]) == (
        "watchedPage", "/pages/home", "bob")
    assert alice.get("/pages/home").status_code == 200  # seen: marked read
    assert alice.get("/_notifications/api/notifications/summary").get_json()["unread"] == 0
    with example.app_context():
        [site] = state().host.sites()
    assert site == SiteFacts(id="main", base_url="http://localhost:5000", title="localhost")


# -- the one-site default ----------------------------------------------------------------------


def test_a_one_site_host_without_its_address_is_refused_at_start_up(database_url):
    with pytest.raises(ConfigError, match="WIKINOTIFY_SITE_URL is not set.*'https://wiki"):
        model_app(second_host(), database_url, Base.metadata, WIKINOTIFY_SITE_URL=None)
    with pytest.raises(ConfigError, match="WIKINOTIFY_SITE_URL is 'wiki.example'; give an "
                                          "http:// or https:// URL"):
        model_app(second_host(), database_url, Base.metadata,
                  WIKINOTIFY_SITE_URL="wiki.example")


def test_the_one_site_is_read_from_the_settings_in_a_worker_too(database_url):
    app = model_app(second_host(), database_url, Base.metadata,
                    WIKINOTIFY_SITE_URL="https://docs.example/wiki",
                    WIKINOTIFY_SITE_TITLE="Docs")
    with app.app_context():  # no request: as a worker runs
        assert state().host.sites() == [
            SiteFacts(id="main", base_url="https://docs.example/wiki", title="Docs")]
        state().db.engine.dispose()


def test_emit_without_a_site_is_dropped_for_a_wiki_with_sites_of_its_own(
        database_url, redis_url, caplog):
    host = MemoryHost()
    host.add_account("ann")
    host.add_page("1", "guide")
    app = memory_app(host, database_url, WIKINOTIFY_REDIS_URL=redis_url)
    with app.app_context(), caplog.at_level(logging.WARNING, logger="wikinotify.emit"):
        assert WikiNotify.emit("page:edit", actor_id="ann", page_id="1") is None
        assert WikiNotify.emit("page:edit", site_id="main", actor_id="ann", page_id="1")
        state().db.session.commit()
        assert "it names no site_id, and MemoryHost has sites of its own" in caplog.text
        state().db.session.remove()
        state().db.engine.dispose()
