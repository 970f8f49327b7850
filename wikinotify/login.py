"""Flask-Login, read in one place: who is signed in, and the decorator that sends a guest
to the wiki's sign-in page.

Flask-Login ships no type information (its names are ``Any`` to mypy), so this module is
where the types wikinotify relies on are stated.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

import flask_login
from flask import Flask, current_app, session
from sqlalchemy.orm import Session

from . import request_kept
from .host import UserFacts
from .inbox import live
from .outbound import push_subscriptions
from .state import state

View = TypeVar("View", bound=Callable[..., Any])

#: The Flask session's key for the random id wikinotify gives a signed-in session: its
#: live streams carry it, so signing that session out ends them and no other.
SESSION_ID_KEY = "_wikinotify_session"


@overload
def caller_id() -> str | None: ...
@overload
def caller_id(*, required: Literal[True]) -> str: ...
def caller_id(*, required: bool = False) -> str | None:
    """Who is asking: the id of Flask-Login's ``current_user``, whom the wiki loads from
    the session (or from an API token, through its ``request_loader``); ``None`` for a
    guest. ``required`` in code only a signed-in account reaches (a view behind
    :func:`login_required` or the API's ``api_login_required``)."""
    user = flask_login.current_user
    if user and user.is_authenticated:
        return str(user.get_id())
    if required:
        # The decorators keep guests out: a guest here is a route that forgot one.
        raise RuntimeError("caller_id(required=True) outside a view that requires a "
                           "signed-in account")
    return None


def caller_facts() -> UserFacts | None:
    """The caller's facts from the wiki (``Host.user``: her groups, language, zone), asked
    once a request: the inbox's access re-check and her zone's times read the same
    facts, so one list is one call. ``None`` for a guest, or an account the wiki no
    longer knows."""
    me = caller_id()
    if me is None:
        return None
    # By the caller's id: a request that signs someone in asks again for her.
    return request_kept.kept(f"caller_facts:{me}", lambda: state().host.user(me))


def session_user_id() -> str | None:
    """The account id ``login_user`` signed into the session (``_user_id``), read without
    loading the account, so not the caller (:func:`caller_id`), only who the session says
    she is: for the summary's 304 only, which trusts it while the wiki has
    loaded that account recently (:func:`wikinotify.inbox.live.trusted_version`). ``None``
    under strong session protection, whose check (where the session comes from) is
    Flask-Login's to make when it loads the account."""
    manager = getattr(current_app, "login_manager", None)
    default = getattr(manager, "session_protection", None)
    if current_app.config.get("SESSION_PROTECTION", default) == "strong":
        return None
    found = session.get("_user_id")
    return None if found is None else str(found)


def login_required(view: View) -> View:
    """Flask-Login's ``login_required``: a guest goes to the wiki's sign-in page."""
    guarded: View = flask_login.login_required(view)
    return guarded


def stream_session_id() -> str | None:
    """The signed-in session's id for a stream it opens, only read: ``None`` for a session
    that has none yet, whose stream then ends at any sign-out of its account. Never given
    here: two tabs opening their first streams at once would get two ids, and the browser
    would keep only the last."""
    found = session.get(SESSION_ID_KEY)
    return found if isinstance(found, str) else None


def give_session_id() -> None:
    """Give the signed-in session an id if it has none: one signed in before wikinotify
    gave ids. Called before every request but the stream's (:func:`stream_session_id`);
    reads the session only, loading no account."""
    if SESSION_ID_KEY not in session and session.get("_user_id") is not None:
        session[SESSION_ID_KEY] = secrets.token_hex(16)


def end_session(app: Flask, user_id: str | None) -> None:
    """This request's session is being signed out: the streams it opened end, in every
    web process, the browser push subscriptions it made are removed, and its id goes with
    it (the next sign-in gets a new one). Called twice
    (:meth:`~wikinotify.WikiNotify.signing_out`, then ``logout_user``), the second call
    has no id and ends only the account's streams and subscriptions made without one.
    The subscriptions go in a transaction of their own, committed here: the wiki's
    sign-out need not commit anything."""
    found = session.pop(SESSION_ID_KEY, None)
    if user_id is None:
        return
    session_id = found if isinstance(found, str) else None
    with Session(state(app).db.engine) as own:
        push_subscriptions.end_session(own, user_id, session_id)
        own.commit()
    live.end_session(app, user_id, session_id)


def _signed_in(app: Flask, user: Any = None, **extra: Any) -> None:
    session[SESSION_ID_KEY] = secrets.token_hex(16)


def _restored(app: Flask, user: Any = None, **extra: Any) -> None:
    """A remember-me cookie signed the session in again: no ``user_logged_in`` is sent."""
    if SESSION_ID_KEY not in session:
        session[SESSION_ID_KEY] = secrets.token_hex(16)


def _signed_out(app: Flask, user: Any = None, **extra: Any) -> None:
    signed_in = user is not None and user.is_authenticated
    end_session(app, str(user.get_id()) if signed_in else None)


def listen(app: Flask) -> None:
    """Follow Flask-Login's sign-ins and sign-outs on ``app`` (``login_user``, a
    remember-me cookie, ``logout_user``). Strong references: the receivers are this
    module's functions."""
    flask_login.user_logged_in.connect(_signed_in, sender=app, weak=False)
    flask_login.user_loaded_from_cookie.connect(_restored, sender=app, weak=False)
    flask_login.user_logged_out.connect(_signed_out, sender=app, weak=False)
