"""The ``WikiNotify`` Flask extension."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

from flask import Flask, current_app

from . import accounts, cli, commits, i18n, login, queue, ratelimit, viewing
from . import emit as emitting
from .categories import LAUNCH_CATEGORIES, Category, CategoryError, Registry, endpoint_disabled
from .config import DEFAULT_CONFIG, ConfigError
from .host import Host
from .instance_settings import site_enabled
from .mail import signing
from .outbound import ssrf
from .state import State, state


class WikiNotify:
    """Notifications for a Flask wiki.

    ::

        notify = WikiNotify(host=MyWikiHost())
        notify.init_app(app)              # after db.init_app(app)
        app.register_blueprint(wikinotify.blueprint)   # at /_notifications

    :param host: the wiki, as a :class:`wikinotify.host.Host`.
    :param categories: the wiki's own categories, registered beside the seven launch
        ones on every app this object sets up (or, after :meth:`init_app`,
        :meth:`register_category`).
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

    def init_app(self, app: Flask, *, host: Host | None = None) -> None:
        """Set wikinotify up on ``app`` (``host`` here wins over the constructor's).

        Settings, each ``WIKINOTIFY_<key>`` with its default in
        :data:`wikinotify.config.DEFAULT_CONFIG` (the README's table says more):

        - ``REDIS_URL``: Redis for RQ, the kick and the live badge (None: embedded,
          ``wikinotify[embedded]``)
        - ``QUEUE``: the RQ queue of the fan-out; mail runs on ``<QUEUE>-mail``
        - ``LANGUAGES``: the languages offered, each with a catalogue
        - ``BASE_TEMPLATE``: the template wikinotify's pages extend
        - ``CATEGORIES``: the keys of the categories to run (None: all registered)
        - ``MAIL_ENABLED``: whether mail can be sent (None: when Flask-Mail has a sender)
        - ``DISPATCH_BUDGET``: seconds a fan-out run works before handing over
        - ``STALE_CLAIM_SECONDS``: when a fan-out claim counts as abandoned
        - ``FANOUT_RANGE_SIZE``: candidates per range of a split fan-out (0: never split)
        - ``UNSUBSCRIBE_MAILTO``: an address for a ``mailto:`` List-Unsubscribe
        - ``UNSUBSCRIBE_RATE``: refused one-click POSTs per client and token per minute
        - ``WRITE_RATE_LIMIT``, ``SEND_RATE_LIMIT``: how fast one account may call the
          writes that make workers or third parties work, and those that send something
          (Flask-Limiter rates, counted in the Redis above)
        - ``MENTION_LIMIT``: how many accounts one comment's @mentions may tell
        - ``MAIL_HOURLY_LIMIT``: mails one reader may get in an hour
        - ``SMTP_TIMEOUT``: seconds the relay has to connect and to answer
        - ``MAIL_LEASE``: seconds a mail run's claim on its rows lasts
        - ``DKIM_SELECTOR``, ``DKIM_DOMAIN``, ``DKIM_PRIVATE_KEY``: DKIM signing
        - ``STREAM_MAX_AGE``: seconds a live stream stays open before the browser
          reconnects
        - ``STREAM_PER_ACCOUNT``, ``STREAM_PER_PROCESS``: live streams one account (in
          all processes) and one web process may hold open
        - ``OUTBOUND_ALLOW``: hosts and networks webhooks and chat may reach although
          not public (default: none)
        - ``OUTBOUND_CONNECT_TIMEOUT``, ``OUTBOUND_TIMEOUT``: seconds a receiver has to
          accept the connection, and to answer in all
        - ``DELIVERY_BATCH``: deliveries one delivery run sends
        - ``DELIVERY_SHARE``: seconds of a delivery run one account's requests may take
        - ``ENDPOINTS_PER_ACCOUNT``: the most webhooks and chat targets one account has

        Needs Flask-SQLAlchemy initialised first. Initialises Flask-Babel when the wiki has
        not (the wiki's own selector wins when it has), and adds wikinotify's catalogue to
        its translation directories. Adds the ``flask wikinotify`` commands to ``app.cli``,
        and a Flask-Limiter of its own that counts wikinotify's limited writes only.
        Refuses, naming the cause, a second registration, a bad setting, and a category
        that is malformed, duplicated or missing translations.
        """
        if "wikinotify" in app.extensions:
            raise RuntimeError(
                "WikiNotify is already registered on this app; create one WikiNotify per "
                "app, or call init_app only once."
            )
        host = host or self._host
        if host is None:
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
        if not app.config["WIKINOTIFY_REDIS_URL"]:
            queue.embedded_redis_class()  # refuses now, naming the extra, if it is missing
        registry = Registry((*LAUNCH_CATEGORIES, *self._extra_categories))
        if app.config["WIKINOTIFY_CATEGORIES"] is not None:
            registry = registry.select(app.config["WIKINOTIFY_CATEGORIES"])
        # wikinotify's own notice that a webhook or chat target was turned off: always
        # there, whatever the wiki selects, since the delivery engine emits it.
        registry.register(endpoint_disabled.category)
        i18n.init_babel(app, languages)
        _check_strings(app, registry.values(), languages)
        _check_seconds("WIKINOTIFY_DISPATCH_BUDGET", app.config["WIKINOTIFY_DISPATCH_BUDGET"],
                       "a dispatch run may work", most=3600)
        _check_seconds("WIKINOTIFY_SMTP_TIMEOUT", app.config["WIKINOTIFY_SMTP_TIMEOUT"],
                       "the SMTP relay has to connect and to answer", most=300)
        _check_seconds("WIKINOTIFY_MAIL_LEASE", app.config["WIKINOTIFY_MAIL_LEASE"],
                       "a mail run's claim lasts", most=86400)
        _check_seconds("WIKINOTIFY_STREAM_MAX_AGE", app.config["WIKINOTIFY_STREAM_MAX_AGE"],
                       "a live stream stays open before the browser reconnects", most=86400)
        for name in (*COUNTED_LIMITS, *STREAM_LIMITS):
            _check_limit(name, app.config[name])
        ratelimit.check_settings(app)
        _check_range_size(app.config["WIKINOTIFY_FANOUT_RANGE_SIZE"])
        _check_seconds("WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT",
                       app.config["WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT"],
                       "a receiver has to accept the connection", most=60)
        _check_seconds("WIKINOTIFY_OUTBOUND_TIMEOUT", app.config["WIKINOTIFY_OUTBOUND_TIMEOUT"],
                       "a receiver has to answer", most=120)
        _check_seconds("WIKINOTIFY_DELIVERY_SHARE", app.config["WIKINOTIFY_DELIVERY_SHARE"],
                       "one account's requests may take of a delivery run", most=3600)
        _check_limit("WIKINOTIFY_ENDPOINTS_PER_ACCOUNT",
                     app.config["WIKINOTIFY_ENDPOINTS_PER_ACCOUNT"])
        ssrf.allowed(app)  # refuses a bad WIKINOTIFY_OUTBOUND_ALLOW entry, naming it
        commits.listen(db.session)
        login.listen(app)  # a signed-out session's streams end
        app.cli.add_command(cli.wikinotify)  # flask wikinotify new-category NAME
        app.extensions["wikinotify"] = State(
            host=host, registry=registry, db=db, limiter=ratelimit.init_app(app),
            dkim=signing.load(app),
        )

    @staticmethod
    def register_category(category: Category, *, app: Flask) -> None:
        """Add one of the wiki's own categories to ``app`` after :meth:`init_app`, in the
        app factory, before it serves: for a category that cannot be passed to the
        constructor (``WikiNotify(categories=[...])``, the usual way).

        Checked as the constructor's are: its fields, a unique key, and its strings in
        every ``WIKINOTIFY_LANGUAGES`` language. Refused while ``WIKINOTIFY_CATEGORIES``
        is set, since that setting chooses among the categories given to the constructor.
        """
        if app.config["WIKINOTIFY_CATEGORIES"] is not None:
            raise CategoryError(
                f"notification category {category.key!r} cannot be registered after "
                "start-up while WIKINOTIFY_CATEGORIES is set; pass it to "
                "WikiNotify(categories=[...]) and name it in the setting."
            )
        languages = _check_languages(app.config["WIKINOTIFY_LANGUAGES"])
        registry = state(app).registry
        registry.check(category)
        _check_strings(app, [category], languages)
        registry.register(category)

    # -- the producer API (§6) ---------------------------------------------------------

    @staticmethod
    def emit(kind: str, **fields: Any) -> int | None:
        """Record an event in the caller's transaction; see :func:`wikinotify.emit.emit`."""
        return emitting.emit(kind, **fields)

    @staticmethod
    def importing() -> AbstractContextManager[None]:
        """A scope whose events come from an import or a storage sync (§6.2)."""
        return emitting.importing()

    @staticmethod
    def bulk() -> AbstractContextManager[None]:
        """A scope whose events come from a bulk operation (§6.2)."""
        return emitting.bulk()

    @staticmethod
    def forget_user(user_id: Any) -> None:
        """Call where the wiki deletes an account, inside that transaction (§14)."""
        accounts.forget_user(state().db.session(), str(user_id))

    @staticmethod
    def enabled_for(site_id: Any) -> bool:
        """Whether notifications are on for ``site_id`` (§11): where an administrator
        has switched them off, hide what promises them ("you will be notified"). In a
        template, ``wikinotify_enabled()`` answers for the current request's site."""
        return site_enabled(state().db.session(), None if site_id is None else str(site_id))

    @staticmethod
    def signing_out() -> None:
        """Call where the wiki signs the current session out *without*
        ``flask_login.logout_user`` (which wikinotify follows by itself), before it
        clears the session: the live streams that session opened end, in every process."""
        login.end_session(current_app._get_current_object(),  # type: ignore[attr-defined]
                          login.current_user_id())

    # -- mark-read-on-view (§10.2) -------------------------------------------------------

    @staticmethod
    def mark_seen(user_id: Any, page_id: Any, *, section: str = "page") -> int:
        """Call where the wiki shows a page (``section="page"``), its discussion
        (``"discussion"``) or its suggestions (``"review"``): the viewer's unread entries
        that link there are marked read. Like :meth:`emit` it joins the caller's
        transaction and never commits; see :func:`wikinotify.viewing.mark_seen`."""
        return viewing.mark_seen(user_id, page_id, section)


def _check_strings(app: Flask, categories: Iterable[Category], languages: Iterable[str]) -> None:
    """Refuse a category with a string some offered language has no translation for."""
    missing = i18n.missing_translations(
        app, [(c.key, msgid) for c in categories for msgid in c.msgids()], languages
    )
    if missing:
        key, language, msgid = missing[0]
        raise CategoryError(
            f"notification category {key!r} has no {language!r} translation for "
            f"{msgid!r}; add it to the {language} catalogue ({len(missing)} missing)"
        )


def _check_seconds(name: str, value: Any, what: str, *, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        raise ConfigError(
            f"{name} is {value!r}; give the seconds {what}, more than 0 and at most {most}."
        )


#: Settings that count something per period: a whole number from 1 to 100,000.
COUNTED_LIMITS = (
    "WIKINOTIFY_UNSUBSCRIBE_RATE",
    "WIKINOTIFY_MENTION_LIMIT",
    "WIKINOTIFY_MAIL_HOURLY_LIMIT",
    "WIKINOTIFY_DELIVERY_BATCH",
)


#: Settings that bound how many live streams are open at once.
STREAM_LIMITS = ("WIKINOTIFY_STREAM_PER_ACCOUNT", "WIKINOTIFY_STREAM_PER_PROCESS")


def _check_limit(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise ConfigError(f"{name} is {value!r}; give a whole number from 1 to 100000.")


def _check_range_size(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"WIKINOTIFY_FANOUT_RANGE_SIZE is {value!r}; give the candidates per range of a "
            "split fan-out as a whole number (e.g. 250000), or 0 never to split one."
        )


def _check_languages(configured: Any) -> tuple[str, ...]:
    if isinstance(configured, str):
        configured = [part.strip() for part in configured.split(",") if part.strip()]
    languages: tuple[str, ...] = tuple(configured)
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


