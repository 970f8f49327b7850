"""Per-app state: the host, the category registry and the database, kept on the app."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flask import Flask, current_app
from flask_limiter import Limiter
from flask_sqlalchemy import SQLAlchemy

from .host import Host
from .wiki_said import WikiSaid

if TYPE_CHECKING:  # the registry's modules import this one
    from .categories import Registry
    from .mail.dkim import DkimKey


@dataclass(frozen=True)
class State:
    """Per-app state, kept in ``app.extensions["wikinotify"]``."""

    host: Host
    registry: Registry
    db: SQLAlchemy
    #: How fast an account may write (see :mod:`wikinotify.ratelimit`).
    limiter: Limiter
    #: The DKIM key notification mail is signed with, or None (see :mod:`wikinotify.mail.dkim`).
    dkim: DkimKey | None = None
    #: What the wiki said for the inbox's access re-check, kept at its version (see
    #: :mod:`wikinotify.wiki_said`).
    wiki_said: WikiSaid = field(default_factory=WikiSaid)


def state(app: Flask | None = None) -> State:
    """The wikinotify state of ``app`` (default: the current app)."""
    app = app or current_app
    try:
        st: State = app.extensions["wikinotify"]
    except KeyError:
        raise RuntimeError(
            "wikinotify is not set up on this app: call WikiNotify(host=...).init_app(app)."
        ) from None
    return st
