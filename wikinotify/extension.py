"""The ``WikiNotify`` Flask extension."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

from flask import Flask, current_app

from . import accounts, base_template, cli, commits, config, i18n, login, queue, ratelimit
from . import emit as emitting
from .blueprint import blueprint
from .categories import LAUNCH_CATEGORIES, Category, CategoryError, Registry, endpoint_disabled
from .config import ConfigError
from .host import Host, check_one_site
from .inbox import viewing
from .instance_settings import site_enabled
from .mail import dkim
from .mail.setup import set_up_mail
from .outbound import push_keys, ssrf
from .schemas.administration import SETTING_RANGES
from .state import State, state

log = logging.getLogger(__name__)


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

        Settings: every ``WIKINOTIFY_*`` key, its default and what it must be are in
        ``docs/settings.md`` (written from :data:`wikinotify.config.SETTINGS`).

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
        # The defaults, each value checked against its rule, and no key that is not a
        # setting (nor one meaning an instance setting, which lives in the database).
        config.load(app, instance_settings=SETTING_RANGES)
        check_one_site(app, host)  # a one-site host names its address
        set_up_mail(app)  # Flask-Mail from the MAIL_* settings, unless the wiki set it up
        for warning in queue.timing_warnings(app):
            log.warning("wikinotify: %s", warning)
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
        ssrf.allowed(app)  # refuses a bad WIKINOTIFY_OUTBOUND_ALLOW entry, naming it
        push_keys.check(app)  # refuses a malformed WIKINOTIFY_VAPID_PRIVATE_KEY, naming it
        commits.listen(db.session)
        login.listen(app)  # a signed-out session's streams end
        app.cli.add_command(cli.wikinotify)  # flask wikinotify new-category NAME
        app.extensions["wikinotify"] = State(
            host=host, registry=registry, db=db, limiter=ratelimit.init_app(app),
            dkim=dkim.load(app),
        )
        base_template.check(app, blueprint)  # if the wiki registered the blueprint first

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

    # -- the producer API (docs/rules.md#emit) -----------------------------------------

    @staticmethod
    def emit(kind: str, **fields: Any) -> int | None:
        """Record an event in the caller's transaction; see :func:`wikinotify.emit.emit`."""
        return emitting.emit(kind, **fields)

    @staticmethod
    def importing() -> AbstractContextManager[None]:
        """A scope whose events come from an import or a storage sync (docs/rules.md#origin)."""
        return emitting.importing()

    @staticmethod
    def bulk() -> AbstractContextManager[None]:
        """A scope whose events come from a bulk operation (docs/rules.md#origin)."""
        return emitting.bulk()

    @staticmethod
    def access_changed() -> None:
        """Call in every transaction of the wiki's that changes what a reader may see, or
        how she is shown it, without emitting an event: a group's members or
        permissions, a page rule, a person's language or zone, a page renamed by a
        script. Like :meth:`emit` it joins the caller's transaction and never commits;
        once that commits, no page of anyone's inbox kept before is given again
        (``WIKINOTIFY_KEPT_PAGES``, docs/adopting.md#kept-pages)."""
        emitting.wiki_changed_at_commit(state().db.session())

    @staticmethod
    def forget_user(user_id: Any) -> None:
        """Call where the wiki deletes an account, inside that transaction
        (docs/rules.md#corner-cases)."""
        accounts.forget_user(state().db.session(), str(user_id))

    @staticmethod
    def enabled_for(site_id: Any) -> bool:
        """Whether notifications are on for ``site_id`` (docs/rules.md#the-site-switch): where an
        administrator has switched them off, hide what promises them ("you will be notified"). In a
        template, ``wikinotify_enabled()`` answers for the current request's site."""
        return site_enabled(state().db.session(), None if site_id is None else str(site_id))

    @staticmethod
    def signing_out() -> None:
        """Call where the wiki signs the current session out *without*
        ``flask_login.logout_user`` (which wikinotify follows by itself), before it
        clears the session: the live streams that session opened end, in every process."""
        login.end_session(current_app._get_current_object(),  # type: ignore[attr-defined]
                          login.caller_id())

    # -- mark-read-on-view (docs/rules.md#mail-cadence) ----------------------------------

    @staticmethod
    def mark_seen(user_id: Any, page_id: Any, *, section: str = "page") -> int:
        """Call where the wiki shows a page (``section="page"``), its discussion
        (``"discussion"``) or its suggestions (``"review"``): the viewer's unread entries
        that link there are marked read. Like :meth:`emit` it joins the caller's
        transaction and never commits; see :func:`wikinotify.inbox.viewing.mark_seen`."""
        return viewing.mark_seen(user_id, page_id, view=section)


def _check_strings(app: Flask, categories: Iterable[Category], languages: Iterable[str]) -> None:
    """Refuse a category with a string some offered language has no translation for."""
    missing = i18n.missing_translations(
        app, [(c.key, msgid) for c in categories for msgid in c.msgids()], languages
    )
    if missing:
        key, language, msgid = missing[0]
        raise CategoryError(
            f"notification category {key!r} has no {language!r} translation for "
            f"{msgid!r}; add it to the {language} catalogue ({len(missing)} missing), or "
            f"leave {language!r} out of WIKINOTIFY_LANGUAGES"
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


