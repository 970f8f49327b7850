"""The demo wiki: a small Flask wiki that uses wikinotify, and its reference host.

::

    flask --app wsgi demo seed     # sites, accounts, groups, pages
    flask --app wsgi demo run      # migrate, seed and serve on http://localhost:5000,
                                   # with a worker, the cron and an SMTP sink for the mail
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, current_app, has_request_context, request
from flask_babel import Babel
from flask_login import LoginManager, current_user
from flask_mail import Mail
from flask_migrate import Migrate
from flask_wtf import CSRFProtect

import wikinotify.dialects
import wikinotify.migrations

from .extensions import notify
from .keyfile import instance_secret_key
from .models import User, db
from .wiki import current_site, forget_kept, load_account

#: The repository root: migrations/ lives beside the demo package.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_LANGUAGE = "en"

#: Merged under the caller's SQLALCHEMY_ENGINE_OPTIONS. A pooled connection the server
#: dropped (a PostgreSQL restart) is replaced before use instead of failing a request, and
#: a failed statement's error, which is logged, does not carry its parameters (comment
#: text, emails, tokens).
ENGINE_OPTIONS = {"pool_pre_ping": True, "hide_parameters": True}


def create_app(
    config: dict[str, Any] | None = None, *, instance_path: str | None = None
) -> Flask:
    """Build the demo wiki. ``config`` (tests) wins over ``FLASK_*`` variables, which win
    over the defaults. Without a SECRET_KEY from either, the one kept in the instance
    folder is used (made at the first start). ``instance_path`` (an absolute path)
    replaces Flask's default, ``instance/`` beside the demo package."""
    app = Flask(__name__, instance_path=instance_path)
    os.makedirs(app.instance_path, exist_ok=True)
    app.config.from_mapping(
        SQLALCHEMY_DATABASE_URI="sqlite:///" + os.path.join(app.instance_path, "demo.sqlite3"),
        # Not sent with a cross-site POST or a framed page: one more guard besides CSRF tokens.
        SESSION_COOKIE_SAMESITE="Lax",
        # The largest request the wiki reads: its forms hold a page of at most 10,000
        # characters, so a 40 MB body is refused before anything parses it.
        MAX_CONTENT_LENGTH=1024 * 1024,
        WIKINOTIFY_BASE_TEMPLATE="demo/wikinotify_base.html",
        # Every change the demo makes to a page or a comment emits an event, and its seed,
        # the one place that changes groups and rules, says so (notify.access_changed):
        # a page of the inbox may be given again while nothing changed
        # (docs/adopting.md#kept-pages).
        WIKINOTIFY_KEPT_PAGES=True,
        BABEL_DEFAULT_LOCALE=SOURCE_LANGUAGE,
        # The SMTP sink `demo run` starts; FLASK_MAIL_* points the mail at a real relay.
        MAIL_SERVER="127.0.0.1",
        MAIL_PORT=8025,
        MAIL_DEFAULT_SENDER="Demo wiki <wiki@localhost>",
        # Where the sink keeps what it receives, for /demo/mailbox: set by `demo run` when
        # it starts the sink, and the page is not served without it.
        DEMO_MAILBOX=None,
        # How the accounts' passwords are hashed (werkzeug's method string). The test
        # suite names a cheap one: it seeds five accounts a test.
        DEMO_PASSWORD_HASH_METHOD="scrypt",
    )
    app.config.from_prefixed_env()
    app.config.update(config or {})
    _complete_config(app)
    _init_extensions(app)
    _init_wikinotify(app)

    from . import cli, views

    app.url_map.converters["row_id"] = views.RowIdConverter  # before its routes
    app.register_blueprint(views.blueprint)
    app.cli.add_command(cli.demo)
    return app


def _complete_config(app: Flask) -> None:
    """What depends on the settings given: the engine options merged under the caller's,
    and the instance's own key when none was given."""
    own = app.config.get("SQLALCHEMY_ENGINE_OPTIONS") or {}
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {**ENGINE_OPTIONS, **own}
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = instance_secret_key(app.instance_path)


def _init_extensions(app: Flask) -> None:
    db.init_app(app)
    with app.app_context():
        # SQLite as the embedded default sets it (docs/operating.md#sqlite-the-embedded-default).
        wikinotify.dialects.tune_sqlite(db.engine)
    Migrate(app, db, directory=os.path.join(ROOT, "migrations"))
    wikinotify.migrations.init_app(app)  # wikinotify's tables: its own branch, beside ours
    login = LoginManager(app)
    login.login_view = "demo.login"
    login.user_loader(_load_user)
    app.teardown_request(forget_kept)  # the account and site a request kept go with it
    CSRFProtect(app)
    Mail(app)
    # Set up before wikinotify, so this selector is the one used (wikinotify keeps it).
    Babel(app, locale_selector=select_locale)


def _init_wikinotify(app: Flask) -> None:
    import wikinotify

    from .host import DemoHost

    notify.init_app(app, host=DemoHost())
    app.register_blueprint(wikinotify.blueprint)


def _load_user(user_id: str) -> User | None:
    try:
        user = load_account(int(user_id))
    except ValueError:
        return None
    # A deactivated account is logged out at its next request.
    return user if user is not None and user.active else None


def _languages() -> list[str]:
    languages = current_app.config["WIKINOTIFY_LANGUAGES"]  # init_app set its default
    if isinstance(languages, str):  # FLASK_WIKINOTIFY_LANGUAGES=en,fr
        languages = [part.strip() for part in languages.split(",")]
    return list(languages)


def select_locale() -> str | None:
    """The user's own language, else the browser's best offer, else the site's."""
    if not has_request_context():
        return None  # Flask-Babel falls back to BABEL_DEFAULT_LOCALE
    languages = _languages()
    if current_user.is_authenticated and current_user.locale in languages:
        return current_user.locale
    best = request.accept_languages.best_match(languages)
    if best:
        return best
    site = current_site()
    if site is not None and site.primary_locale in languages:
        return site.primary_locale
    return SOURCE_LANGUAGE
