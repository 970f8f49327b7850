"""``flask --app wsgi demo seed``, ``demo import`` and ``demo run``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

import click
import flask_migrate
import sqlalchemy as sa
from flask import Flask, current_app
from flask.cli import AppGroup
from werkzeug.serving import BaseWSGIServer, make_server

from wikinotify import queue as wikinotify_queue
from wikinotify.instance_settings import instance_settings
from wikinotify.models import InstanceSettings

from . import mailbox, wiki
from .extensions import notify
from .models import (
    PERMISSIONS,
    ApprovalRule,
    Comment,
    Group,
    Page,
    PageRule,
    Revision,
    Site,
    User,
    Watch,
    db,
)

if TYPE_CHECKING:
    from aiosmtpd.controller import Controller

demo = AppGroup("demo", help="The demo wiki: sample data, or everything at once.")

PASSWORD = "password"

#: By hostname; the first is the default site.
SITES = {
    "localhost": {"title": "Main wiki", "base_url": "http://localhost:5000", "is_default": True},
    "docs.localhost": {"title": "Docs", "base_url": "http://docs.localhost:5000"},
}

USERS = {
    "alice": {"display_name": "Alice Liddell"},
    "bob": {"display_name": "Bob Builder"},
    "carol": {"display_name": "Carol Danvers", "locale": "fr"},
    "dave": {"display_name": "Dave Lister", "verified": False},
    "admin": {"display_name": "Admin", "is_admin": True},
}

PAGES = {
    "home": ("Home", "admin", "Welcome to the demo wiki.\n\nWatch a page to hear about it."),
    "handbook/onboarding": (
        "Onboarding",
        "carol",
        "Day one: get a laptop, read the handbook, say hello.\n\n"
        "Suggestions to the handbook are reviewed by the Reviewers group.",
    ),
    "ops/runbook": ("Runbook", "alice", "Restricted to the Ops group.\n\n1. Check the dashboards."),
}

BANNER = """\
Demo wiki: http://localhost:{port}/   (second site: http://docs.localhost:{port}/)
Accounts, all with the password "password":
  alice   Everyone + Ops, watches handbook/onboarding and ops/runbook
  bob     Everyone + Ops
  carol   Everyone + Reviewers, reads French
  dave    Everyone, unverified email (in-app notifications only)
  admin   Everyone + Reviewers, administrator
{mail}
{delay}
"""

#: The demo's email delay: a newcomer who saves a page alice watches sees her mail in the
#: mailbox within a minute and a half (this delay, then the next minute's mail run). The
#: library's default is for a real wiki, where a burst of saves should make one mail.
DEMO_EMAIL_DELAY = 30

#: The hosts the SMTP sink stands in for: any other MAIL_SERVER is a real relay.
LOCAL_MAIL_SERVERS = ("127.0.0.1", "localhost")


def _get_or_create(model: type, defaults: dict[str, Any] | None = None, **keys: Any) -> Any:
    """The row of ``model`` matching ``keys``, added with ``defaults`` if missing."""
    row = db.session.scalar(sa.select(model).filter_by(**keys))
    if row is None:
        row = model(**keys, **(defaults or {}))
        db.session.add(row)
    return row


def _user(username: str, extra: dict[str, Any]) -> User:
    user = db.session.scalar(sa.select(User).filter_by(username=username))
    if user is None:
        user = User(username=username, email=f"{username}@example.com", **extra)
        user.set_password(PASSWORD)  # only for a new account: a re-seed keeps changes
        db.session.add(user)
    return user


def _group(name: str, permissions: list[str], members: list[User]) -> Group:
    group = _get_or_create(Group, {"permissions": permissions}, name=name)
    group.members.extend(user for user in members if user not in group.members)
    return group


def _rule(group: Group, prefix: str, *, deny: bool) -> None:
    defaults = {"permissions": list(PERMISSIONS)}
    _get_or_create(PageRule, defaults, group=group, path_prefix=prefix, deny=deny)


def _page(site: Site, path: str, users: dict[str, User]) -> tuple[Page, bool]:
    """The seeded page at ``path``, and whether it was created just now."""
    page = db.session.scalar(sa.select(Page).filter_by(site_id=site.id, path=path))
    if page is not None:
        return page, False
    title, author, content = PAGES[path]
    page = Page(site_id=site.id, path=path, title=title, content=content, tags=[])
    page.author_id = users[author].id
    page.revisions.append(Revision(title=title, content=content, author_id=page.author_id))
    db.session.add(page)
    db.session.flush()
    return page, True


def _thread(page: Page, users: dict[str, User]) -> None:
    question = Comment(
        page=page, author_id=users["carol"].id, body="Should we add a section on laptops?"
    )
    reply = Comment(
        page=page,
        author_id=users["alice"].id,
        parent=question,
        body="Yes! @bob, could you write it? You set most of them up.",
    )
    db.session.add_all([question, reply])


def seed() -> None:
    """Add the demo's sites, accounts, groups, rules, pages, watches and comments.

    Only what is missing is added, so seeding twice changes nothing. Rows are written
    directly rather than through :mod:`demo.wiki`, since sample data is no one's action
    and must not notify anyone.
    """
    sites = [_get_or_create(Site, extra, hostname=name) for name, extra in SITES.items()]
    db.session.flush()
    main = sites[0]
    users = {name: _user(name, extra) for name, extra in USERS.items()}
    everyone = _group("Everyone", list(PERMISSIONS), list(users.values()))
    ops = _group("Ops", [], [users["alice"], users["bob"]])
    reviewers = _group("Reviewers", [], [users["carol"], users["admin"]])
    db.session.flush()
    # ops/ is for Ops only: Everyone loses everything there, Ops gains it.
    _rule(everyone, "ops/", deny=True)
    _rule(ops, "ops/", deny=False)
    approval = _get_or_create(
        ApprovalRule, {"enabled": True}, site_id=main.id, path_prefix="handbook/"
    )
    if reviewers not in approval.reviewer_groups:
        approval.reviewer_groups.append(reviewers)
    pages = {path: _page(main, path, users) for path in PAGES}
    for path in ("handbook/onboarding", "ops/runbook"):
        page_id, user_id = pages[path][0].id, users["alice"].id
        _get_or_create(Watch, {"site_id": main.id}, page_id=page_id, user_id=user_id)
    onboarding, created = pages["handbook/onboarding"]
    if created:
        _thread(onboarding, users)
    notify.access_changed()  # groups and rules, whose changes emit nothing
    db.session.commit()


@demo.command("seed")
def seed_command() -> None:
    """Add the sample sites, accounts, groups and pages (safe to run again)."""
    seed()
    click.echo("Demo data is in place. Accounts: alice, bob, carol, dave, admin (password).")


@demo.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--site", "hostname", help="The site's hostname (default: the default site).")
@click.option("--as", "username", help="The account saving the pages (default: none).")
def import_command(file: IO[str], hostname: str | None, username: str | None) -> None:
    """Create or update pages from FILE, a JSON list of {"path", "title", "content"}.

    Watchers of the pages it changes are notified; the opt-in "new pages" feed is not.
    """
    records = _json_list(file)
    site = wiki.find_site(hostname) if hostname else wiki.default_site()
    if site is None and hostname:
        raise click.ClickException(f"No site has the hostname {hostname}.")
    if site is None:
        raise click.ClickException("The wiki has no site yet: run `flask --app wsgi demo seed`.")
    user = _account(username) if username else None
    try:
        count = wiki.import_pages(site, user, records)
    except wiki.WikiError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"Imported {count} page{'' if count == 1 else 's'} into {site.hostname}.")


def _json_list(file: IO[str]) -> list[Any]:
    try:
        records = json.load(file)
    except json.JSONDecodeError as error:
        raise click.ClickException(f"{file.name} is not JSON: {error}") from None
    if not isinstance(records, list):
        raise click.ClickException(f"{file.name} must hold a JSON list of pages.")
    return records


def _account(username: str) -> User:
    user = db.session.scalar(sa.select(User).filter_by(username=username))
    if user is None:
        raise click.ClickException(f"No account named {username}.")
    return user


@demo.command("run")
def run_command() -> None:
    """Migrate the database, seed it and serve the wiki on 127.0.0.1:$PORT (5000), with a
    worker, the cron and an SMTP sink that keeps the wiki's mail for /demo/mailbox."""
    app = current_app._get_current_object()
    flask_migrate.upgrade(revision="heads")  # the demo's and wikinotify's (wikinotify.migrations)
    fresh = wiki.default_site() is None
    seed()
    if fresh:
        quick_first_mail()
    delay = _delay_line()
    db.session.remove()  # the server's requests open their own sessions
    port = int(os.environ.get("PORT", 5000))
    # A SIGTERM (a service manager, `timeout`) stops the server, so the finally below
    # stops the worker, the cron and the embedded Redis instead of orphaning them. Set
    # before they start: a SIGTERM right after the banner used to kill this process alone.
    # It asks the server to stop rather than raising where the main thread happens to be:
    # raised during the server's start (a loaded machine, a test that stops the demo as
    # soon as its banner is out), the exit was lost and the demo served on.
    stopping = threading.Event()
    server: BaseWSGIServer | None = None

    def stop(*_: object) -> None:
        stopping.set()
        if server is not None:  # serve_forever returns (at once, if not yet begun)
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    sink: Controller | None = None
    helpers: list[subprocess.Popen] = []
    try:
        # Before the worker: the first mail it sends must find the sink listening.
        sink = start_mail_sink(app)
        helpers = _start_workers(app)
        # Not app.run(): inside any `flask` command it returns at once (FLASK_RUN_FROM_CLI).
        server = make_server("127.0.0.1", port, app, threaded=True)
        click.echo(BANNER.format(port=port, mail=_mail_line(app, port, sink), delay=delay))
        if not stopping.is_set():
            server.log_startup()
            server.serve_forever()  # Ctrl-C returns from it too
    finally:
        if server is not None:
            server.server_close()
        for process in helpers:
            process.terminate()
        for process in helpers:
            process.wait(timeout=10)
        if sink is not None:
            sink.stop()
        wikinotify_queue.stop_embedded()


def quick_first_mail() -> None:
    """A new demo database mails after :data:`DEMO_EMAIL_DELAY`: only a new one, so a
    delay set in Admin → Notifications since is kept across restarts."""
    instance_settings(db.session).email_delay_seconds = DEMO_EMAIL_DELAY
    db.session.commit()


def _delay_line() -> str:
    library = InstanceSettings.__table__.c.email_delay_seconds.default.arg
    delay = instance_settings(db.session).email_delay_seconds
    return (f"Mail is sent {_duration(delay)} after an event, at the next minute's mail run "
            f"(the library's default is {_duration(library)}; change it in Admin → "
            "Notifications).")


def _duration(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds >= 60 and seconds % 60 == 0 else f"{seconds} s"


def start_mail_sink(app: Flask) -> Controller | None:
    """The SMTP sink on 127.0.0.1:MAIL_PORT, unless MAIL_SERVER names a real relay.

    Once it listens, ``app`` (this process's web server) serves /demo/mailbox from the
    sink's folder: DEMO_MAILBOX, else ``mailbox/`` in the instance folder.
    """
    if app.config["MAIL_SERVER"] not in LOCAL_MAIL_SERVERS:
        return None
    port = app.config["MAIL_PORT"]
    folder = app.config["DEMO_MAILBOX"] or os.path.join(app.instance_path, "mailbox")
    try:
        sink = mailbox.start_sink(folder, "127.0.0.1", port)
    except ImportError:
        # The demo extra brings it (./dev demo installs it); the wiki runs without it,
        # minus its mail.
        click.echo(
            "aiosmtpd is not installed (pip install 'wikinotify[demo]'): no SMTP sink, so "
            "the wiki's mail cannot be delivered.",
            err=True,
        )
        return None
    except OSError as error:
        raise click.ClickException(
            f"The SMTP sink cannot listen on 127.0.0.1:{port} ({error.strerror or error}); "
            "choose another port with FLASK_MAIL_PORT."
        ) from None
    app.config["DEMO_MAILBOX"] = folder
    return sink


def _mail_line(app: Flask, port: int, sink: Controller | None) -> str:
    if sink is None:
        return f"Mail goes to {app.config['MAIL_SERVER']}:{app.config['MAIL_PORT']}."
    return (
        f"Mail: every message is kept at http://localhost:{port}/demo/mailbox for admin "
        f"(SMTP sink on 127.0.0.1:{app.config['MAIL_PORT']})"
    )


#: What a worker needs to send mail where this process would.
MAIL_SETTINGS = ("MAIL_SERVER", "MAIL_PORT", "MAIL_DEFAULT_SENDER")


def _start_workers(app: Flask) -> list[subprocess.Popen]:
    """One ``rq worker`` serving both queues (fan-out first, then mail) and one
    ``rq cron``, as production runs them, on the embedded Redis (or WIKINOTIFY_REDIS_URL)
    and the same database."""
    redis_url = wikinotify_queue.redis_url(app)  # starts the embedded server if needed
    app.config["WIKINOTIFY_REDIS_URL"] = redis_url
    env = {
        **os.environ,
        "FLASK_SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"],
        "FLASK_WIKINOTIFY_REDIS_URL": redis_url,
        "FLASK_WIKINOTIFY_QUEUE": app.config["WIKINOTIFY_QUEUE"],
        # The worker sends the mail, so it must reach the same server (the sink). JSON, as
        # from_prefixed_env() reads it: a value that looks like a number stays a string.
        **{f"FLASK_{key}": json.dumps(app.config[key]) for key in MAIL_SETTINGS},
    }
    rq = os.path.join(os.path.dirname(sys.executable), "rq")
    # Their own session: Ctrl-C reaches only this process, which then stops them once.
    options = {"cwd": os.path.dirname(app.root_path), "env": env, "start_new_session": True}
    return [
        subprocess.Popen([rq, "worker", "--url", redis_url,
                          *wikinotify_queue.queue_names(app)], **options),
        subprocess.Popen([rq, "cron", "wikinotify.jobs.cron", "--url", redis_url], **options),
    ]
