"""The summary's polls, answered before Flask dispatches them from what Redis keeps
(docs/operating.md#the-badges-unchanged-polls).

A badge whose stream is down polls the summary with the tag it holds, and nearly every
answer is a 304; the rest are the body kept in Redis at the summary's current version.
Flask's way to either answer costs more than the answer itself: the request context, the
signed session cookie decoded (HMAC, base64, JSON), the wiki's hooks and wikinotify's;
the answer is one Redis read. ``bench/live.py`` measured the 304 at 55% of a trivial
endpoint's rate on the same server, and the kept body at about 50%.

So when the blueprint is registered, the app's WSGI callable is wrapped by
:class:`UnchangedPolls`, which remembers the requests the full path answered without the
database, a 304 or the kept body (the view marks them, :func:`answered_from_redis`):
every header but ``If-None-Match`` the same (so the same cookies: the same signed
session, the same account), from the same address, to the same URL, with no cookie set
in the answer. The same request again is answered here after what the full path checks
for it without the database, read by the same function
(:func:`wikinotify.inbox.live.trusted_summary`, one Redis ``MGET``): the account's trust
(the wiki loaded it in the last few minutes) and the summary's version, with the body
kept at that version. The tag it holds still current: the full path's 304 again, its
headers and the tag. Another tag (or none) and a body kept: the full path's 200 with
that body, its headers as a 200 of this request had them (so only once one was
remembered), the body's length and the tag. Anything else (no body kept at the version,
no trust, Redis down, any header changed, a remembered request older than
:data:`~wikinotify.inbox.live.ACCOUNT_RECHECK_SECONDS` or than its session cookie's
signature allows) goes down the full path, which may remember it anew.

What a remembered poll skips is what the full path had just decided for the very same
request: the wiki's hooks (its answer can only be this 304, this kept body or a refusal,
and a refusal of the account is seen through the trust, which a refused account loses),
Flask's session (only Flask's own signed cookie sessions are remembered: their content
is their bytes, and a cookie past its ``PERMANENT_SESSION_LIFETIME`` is not answered),
and the view. The body holds counts and the site's switch, no entry, so nothing in it
is for an access check to decide. A kept page of the inbox (:mod:`.kept_pages`) that the
list's view gave is remembered likewise, and given again here at the same versions, its
times said afresh. A wiki whose hooks must see every request sets
``WIKINOTIFY_SUMMARY_SHORTCUT`` to False.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from flask import Flask, current_app, request
from flask.sansio.app import App
from flask.sessions import SecureCookieSessionInterface
from itsdangerous import BadSignature
from werkzeug.http import parse_etags, remove_entity_headers

from ..config import config
from ..inbox import live
from . import kept_pages
from .core import summary_etag

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

#: Where the summary's view leaves, for this module, whom it answered from Redis
#: (:func:`answered_from_redis`).
_ANSWERED = "wikinotify.unchanged_poll"
#: Remembered requests beyond this many: the oldest remembered goes.
KEEP = 10_000
#: Request headers a remembered poll may differ in: the tag it holds.
_ASKED_TAG = "HTTP_IF_NONE_MATCH"
#: What a remembered answer is given anew rather than replayed: the tag, the date (the
#: server adds the current one) and the body's length.
_NOT_REPLAYED = frozenset({"etag", "date", "content-length"})


@dataclass
class _Remembered:
    """A request the full path answered from Redis: whose summary, where, until when,
    with which headers (a 304's; and a 200's, once it answered one); and the tag of the
    last version seen (the tag is a hash)."""

    user_id: str
    site_id: str | None
    until: float
    unchanged_headers: list[tuple[str, str]]
    body_headers: list[tuple[str, str]] | None
    #: For a page of the list, the kept page's shape (:mod:`.kept_pages`); ``None`` for
    #: the summary.
    page: str | None = None
    tagged: tuple[str, str] = ("", "")

    def tag(self, version: str) -> str:
        seen, tag = self.tagged
        if seen != version:
            tag = summary_etag(self.user_id, self.site_id, version)
            self.tagged = (version, tag)
        return tag


#: An answer given here: its status, headers and body.
Answer = tuple[str, list[tuple[str, str]], list[bytes]]


class UnchangedPolls:
    """WSGI middleware around the app: remembered polls answered here, every other
    request passed on (see the module's docstring)."""

    def __init__(self, app: Flask, wsgi_app: WSGIApplication, *endpoints: str) -> None:
        self.app = app
        self.wsgi_app = wsgi_app
        self._remembered: dict[bytes, _Remembered] = {}
        self._lock = threading.Lock()
        self.endpoints = endpoints
        #: The summary's and the list's paths in this app (their rules have no variable
        #: part), found at the first request: any other request costs this wrapper a
        #: look-up, not a digest of its headers.
        self._paths: frozenset[str] = frozenset()
        self._looked_up = False

    def __call__(self, environ: WSGIEnvironment,
                 start_response: StartResponse) -> Iterable[bytes]:
        paths = self._paths if self._looked_up else self._find_paths()
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") not in paths:
            return self.wsgi_app(environ, start_response)
        shape = _shape(environ)
        remembered = self._remembered.get(shape)
        if remembered is not None:
            answer = self._answer(shape, remembered, environ)
            if answer is not None:
                status, headers, body = answer
                start_response(status, headers)
                return body
        return self.wsgi_app(environ, self._remembering(environ, start_response))

    def _find_paths(self) -> frozenset[str]:
        """The endpoints' rules (the app is whole by the first request)."""
        found: set[str] = set()
        for endpoint in self.endpoints:
            try:
                found.update(rule.rule for rule in self.app.url_map.iter_rules(endpoint))
            except KeyError:  # no such endpoint: nothing of it is answered here
                pass
        self._paths = frozenset(found)
        self._looked_up = True
        return self._paths

    def _answer(self, shape: bytes, remembered: _Remembered,
                environ: WSGIEnvironment) -> Answer | None:
        """The full path's answer to this poll, checked as the full path checks it: a 304
        if it holds the current tag, else the body kept at the current version; ``None``
        if that cannot be told here."""
        if time.time() >= remembered.until:
            with self._lock:
                self._remembered.pop(shape, None)
            return None
        if remembered.page is not None:
            return self._kept_page(remembered, environ)
        trusted = live.trusted_summary(self.app, remembered.user_id, remembered.site_id)
        if trusted is None:
            return None
        version, body = trusted
        tag = remembered.tag(version)
        etag = ("ETag", f'"{tag}"')
        asked = environ.get(_ASKED_TAG)
        if asked is not None and (asked == f'"{tag}"' or parse_etags(asked).contains(tag)):
            return "304 NOT MODIFIED", [*remembered.unchanged_headers, etag], []
        if body is None or remembered.body_headers is None:
            return None
        return ("200 OK", [*remembered.body_headers, ("Content-Length", str(len(body))), etag],
                [body])

    def _kept_page(self, remembered: _Remembered, environ: WSGIEnvironment) -> Answer | None:
        """The list's answer: the page kept at the current versions, its times said now;
        else ``None``, and the versions read are left for the view
        (:func:`kept_pages.look`)."""
        shape = cast(str, remembered.page)
        version, kept = live.look_page(self.app, remembered.user_id, remembered.site_id,
                                       kept_pages.slot(shape))
        body = kept_pages.told(self.app, kept, shape)
        if body is None or remembered.body_headers is None:
            environ[kept_pages.LOOKED_UP] = version
            return None
        return "200 OK", [*remembered.body_headers, ("Content-Length", str(len(body)))], [body]

    def _remembering(self, environ: WSGIEnvironment,
                     start_response: StartResponse) -> StartResponse:
        """``start_response``, remembering the answer if the summary's view marked it."""

        def remember(status: str, headers: list[tuple[str, str]],
                     exc_info: Any = None) -> Callable[[bytes], object]:
            answered = environ.get(_ANSWERED)
            if answered is not None and status[:3] in ("200", "304") and exc_info is None:
                self._remember(environ, answered, status.startswith("200"), headers)
            return start_response(status, headers, exc_info)

        return remember

    def _remember(self, environ: WSGIEnvironment, answered: Answered,
                  with_body: bool, headers: list[tuple[str, str]]) -> None:
        if any(name.lower() == "set-cookie" for name, _ in headers):
            return  # the session changed: its next request is another one
        user_id, site_id, cookie_until, page = answered
        until = min(cookie_until, time.time() + live.ACCOUNT_RECHECK_SECONDS)
        kept = [(name, value) for name, value in headers
                if name.lower() not in _NOT_REPLAYED]
        # A 304's headers are a 200's without those of the body, as werkzeug removes them.
        unchanged = list(kept)
        remove_entity_headers(unchanged)
        shape = _shape(environ)
        with self._lock:
            earlier = self._remembered.pop(shape, None)
            body_headers = kept if with_body else earlier.body_headers if earlier else None
            self._remembered[shape] = _Remembered(user_id, site_id, until, unchanged,
                                                  body_headers, page)
            while len(self._remembered) > KEEP:
                del self._remembered[next(iter(self._remembered))]


def _shape(environ: WSGIEnvironment) -> bytes:
    """What makes two requests the same poll: every header but the tag, the address, the
    scheme and the URL (a digest: a browser's headers are a kilobyte)."""
    parts = [environ.get("REMOTE_ADDR", ""), environ.get("wsgi.url_scheme", ""),
             environ.get("SCRIPT_NAME", ""), environ.get("PATH_INFO", ""),
             environ.get("QUERY_STRING", "")]
    parts += [f"{name}:{value}" for name, value in environ.items()
              if name.startswith("HTTP_") and name != _ASKED_TAG]
    return hashlib.blake2b("\n".join(parts).encode("utf-8", "surrogateescape"),
                           digest_size=16).digest()


#: Whom a view answered from Redis: the account, the site, until when the session's
#: cookie holds, and the kept page's shape (``None``: the summary).
Answered = tuple[str, str | None, float, str | None]


def answered_from_redis(user_id: str, site_id: str | None, *, page: str | None = None) -> None:
    """A view answers this request from Redis for ``user_id`` on ``site_id``, the account
    being the one the session names: the summary's (a 304, or the body kept at the
    current version), or the list's (the page kept as ``page`` says,
    :mod:`.kept_pages`). :class:`UnchangedPolls` may answer the same request again. Only
    for Flask's signed cookie session, and until its signature expires."""
    if not config("SUMMARY_SHORTCUT"):
        return
    until = _session_cookie_until(current_app)
    if until is not None:
        answered: Answered = (user_id, site_id, until, page)
        request.environ[_ANSWERED] = answered


def _session_cookie_until(app: Flask) -> float | None:
    """When Flask stops accepting this request's session cookie (its signature's time
    plus ``PERMANENT_SESSION_LIFETIME``, as Flask's ``open_session`` checks it); ``None``
    when the session is not Flask's own signed cookie, whose content is its bytes."""
    interface = app.session_interface
    if type(interface) is not SecureCookieSessionInterface:
        return None
    serializer = interface.get_signing_serializer(app)
    cookie = request.cookies.get(app.config["SESSION_COOKIE_NAME"])
    if serializer is None or not cookie:
        return None
    max_age = int(app.permanent_session_lifetime.total_seconds())
    try:
        _, signed_at = serializer.loads(cookie, max_age=max_age, return_timestamp=True)
    except BadSignature:
        return None
    return float(signed_at.timestamp() + max_age)


def wrap(app: App, *endpoints: str) -> None:
    """Put :class:`UnchangedPolls` around ``app``'s WSGI callable (once), for the summary
    and the list at ``endpoints`` (the blueprint's name as registered, and the views')."""
    if isinstance(app, Flask) and not isinstance(app.wsgi_app, UnchangedPolls):
        app.wsgi_app = UnchangedPolls(  # type: ignore[method-assign]
            app, app.wsgi_app, *endpoints)
