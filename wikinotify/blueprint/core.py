"""The blueprint object and what every route shares: the guards on writes, JSON errors."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

import werkzeug.wrappers
from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    jsonify,
    redirect,
    render_template,
    request,
)
from flask.blueprints import BlueprintSetupState
from flask.sansio.app import App
from flask.typing import ResponseReturnValue
from flask_limiter import RateLimitExceeded
from flask_wtf.csrf import validate_csrf
from marshmallow import ValidationError
from sqlalchemy.orm import Session
from werkzeug.exceptions import HTTPException
from wtforms.validators import ValidationError as WTFValidationError

from .. import base_template, inbox, ratelimit, request_kept
from ..config import config
from ..inbox import live
from ..instance_settings import site_enabled
from ..login import caller_id
from ..schemas import SummarySchema, dump, flatten_messages
from ..state import state

_PACKAGE_DIR = os.path.dirname(os.path.dirname(__file__))
#: Flask-WTF's default ``WTF_CSRF_HEADERS``, for a wiki that has not set Flask-WTF up.
CSRF_HEADERS = ("X-CSRFToken", "X-CSRF-Token")

P = ParamSpec("P")

#: Registered by the wiki: ``app.register_blueprint(blueprint)`` (or with its own prefix).
bp = Blueprint(
    "wikinotify",
    __name__,
    url_prefix="/_notifications",
    template_folder=os.path.join(_PACKAGE_DIR, "templates"),
    static_folder=os.path.join(_PACKAGE_DIR, "static", "wikinotify"),
    static_url_path="/static",
)
# What a request kept for itself goes with its context, not with its environ (which the
# server holds for a stream's life).
bp.teardown_app_request(request_kept.forget)


#: The largest body any wikinotify write accepts: its JSON bodies and forms are small,
#: and a bigger one is refused before it is read, let alone parsed.
MAX_BODY = 64 * 1024
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _exempt_from_global_csrf(app: App) -> None:
    """Leave wikinotify's routes to their own CSRF defence when the wiki protects every
    POST with Flask-WTF's ``CSRFProtect``.

    The forms validate their own token (``FlaskForm``); every API write must be JSON or
    carry the token in a header (:func:`_guard_writes`); and the RFC 8058 one-click POST
    comes from a mail client that has no token to send.
    """
    csrf = app.extensions.get("csrf")
    if csrf is not None:
        csrf.exempt(bp)


#: Views no rate limit of the wiki's may count: what probes and scrapers call every few
#: seconds from one address (``@unlimited``).
_unlimited: list[Callable[..., Any]] = []

V = TypeVar("V", bound=Callable[..., Any])


def unlimited(view: V) -> V:
    """Mark ``view`` as exempt from every Flask-Limiter the wiki sets up (its default and
    application-wide limits): a load balancer's probe must never be answered 429."""
    _unlimited.append(view)
    return view


def _exempt_from_the_wikis_limiters(app: App) -> None:
    """Exempt the :func:`unlimited` views in each of the wiki's Flask-Limiters (each
    exemption is a name in a dict: doing it again changes nothing). wikinotify's own
    limiter counts only the writes marked for it."""
    for limiter in app.extensions.get("limiter", ()):
        for view in _unlimited:
            limiter.exempt(view)


@bp.record_once
def _exempt_when_registered(setup_state: BlueprintSetupState) -> None:
    """``CSRFProtect`` (or a Flask-Limiter) set up before the blueprint: its check runs
    first, so the exemption must be in place from the start."""
    _exempt_from_global_csrf(setup_state.app)
    _exempt_from_the_wikis_limiters(setup_state.app)


@bp.before_app_request
def _exempt_before_the_csrf_check() -> None:
    """``CSRFProtect`` (or a Flask-Limiter) set up after the blueprint: this hook was
    registered first, so it runs before their checks of every request and can still
    exempt the blueprint and the unlimited views."""
    _exempt_from_global_csrf(current_app)
    _exempt_from_the_wikis_limiters(current_app)


def _is_api_request() -> bool:
    return "/api/" in request.path


def _csrf_header_ok() -> bool:
    """A token in Flask-WTF's header. No other origin can set a custom header without a
    CORS preflight, so its presence already says "a script of this wiki"; where CSRF is
    on (``WTF_CSRF_ENABLED``, the default) it must also be valid."""
    names = current_app.config.get("WTF_CSRF_HEADERS", CSRF_HEADERS)
    token = next((request.headers[name] for name in names if request.headers.get(name)), None)
    if not token:
        return False
    if not current_app.config.get("WTF_CSRF_ENABLED", True):
        return True
    try:
        validate_csrf(token)
    except WTFValidationError:
        return False
    return True


def _body_limit() -> int:
    """:data:`MAX_BODY`, or the wiki's own ``MAX_CONTENT_LENGTH`` if that is smaller."""
    configured = current_app.config.get("MAX_CONTENT_LENGTH")
    return min(MAX_BODY, configured) if configured else MAX_BODY


@bp.before_request
def _guard_writes() -> ResponseReturnValue | None:
    """Every write: at most :data:`MAX_BODY`, refused before it is read (a chunked body
    too, through ``max_content_length``). Every API write: JSON, or the CSRF header, so
    a cross-site ``text/plain`` form post cannot reach it."""
    if request.method not in WRITE_METHODS:
        return None
    limit = request.max_content_length = _body_limit()
    too_large = f"A request body may hold at most {limit - 1} bytes."
    if (request.content_length or 0) >= limit:
        abort(413, too_large)
    # A streamed (chunked) body has no length to refuse up front, and reading stops
    # quietly at the limit: read it once here, and a body that filled it is too large.
    if request.content_length is None and len(request.get_data(cache=True)) >= limit:
        abort(413, too_large)
    if not _is_api_request() or request.mimetype == "application/json" or _csrf_header_ok():
        return None
    if caller_id() is None:
        return None  # a guest has nothing to forge a request with: the view answers 401
    if request.content_length or request.headers.get("Transfer-Encoding"):
        abort(415, "Send the body as application/json.")
    return json_error(400, "csrf", "Send the request as application/json, or with the "
                                   "X-CSRFToken header the page gives its scripts.")


@bp.after_request
def _not_framed(response: Response) -> Response:
    """No other site may frame wikinotify's pages: "Stop all email" and the admin's save
    buttons must not be clickable through someone else's page (clickjacking)."""
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    return response


def json_body(*, optional: bool = False) -> Any:
    """The request's JSON body; with ``optional``, an absent one is ``{}``. Anything that
    is not JSON is a 400 naming the body, never read as "nothing" (a malformed "mark
    read" must not mean "mark everything read")."""
    if optional and not request.get_data(cache=True):
        return {}
    if request.mimetype != "application/json":
        abort(415, "Send the body as application/json.")
    try:
        return json.loads(request.get_data(cache=True), parse_int=_json_integer)
    except (ValueError, RecursionError):
        raise ValidationError({"body": ["The body is not valid JSON."]}) from None


def _json_integer(digits: str) -> int | Decimal:
    """A JSON integer; one longer than ``int()`` reads (4,300 digits) as a ``Decimal``,
    which no integer field accepts: the 400 then names the field, not the whole body."""
    try:
        return int(digits)
    except ValueError:
        return Decimal(digits)


#: A form's number as ``int()`` may read it: a sign and at most this many digits (any
#: range a setting has is far inside it, and the schema says which one).
_FORM_INTEGER = re.compile(r"[-+]?[0-9]{1,30}")


def form_integer(raw: str) -> int | str:
    """A form field's text as an integer when it is one; anything else (a word, 5,000
    digits) stays text, for the schema to refuse naming the field, never a 500."""
    text = raw.strip()
    return int(text) if _FORM_INTEGER.fullmatch(text) else raw


def is_local_path(wanted: str, *, within: str = "/") -> bool:
    r"""Whether ``wanted`` is a path on this site: ``within`` itself, or under it when it
    ends with ``/``. One leading slash and no backslash, control character or whitespace:
    a browser reads ``\`` as ``/`` and drops tabs and newlines from a URL (to it,
    ``/<tab>/evil.example/`` is ``//evil.example/``, another host), and a line break
    cannot be sent in a ``Location`` header."""
    if not wanted.startswith("/") or wanted.startswith("//") or "\\" in wanted:
        return False
    if not wanted.isprintable() or any(character.isspace() for character in wanted):
        return False
    path = urlsplit(wanted).path
    return path == within or (within.endswith("/") and path.startswith(within))


def redirect_back(default: str, *, within: str = "/") -> werkzeug.wrappers.Response:
    """Back where a form's button was (its ``next``) when that is a path on this site
    (:func:`is_local_path`), else to ``default``: every "back" of wikinotify's forms."""
    wanted = request.form.get("next", "")
    return redirect(wanted if is_local_path(wanted, within=within) else default)


def caller_is_admin() -> bool:
    """Whether the caller is signed in and may open Admin → Notifications
    (``Host.is_admin``): the administration's guard, and the link to it that
    wikinotify's own pages show administrators alone (``wikinotify_is_admin()``)."""
    me = caller_id()
    return me is not None and state().host.is_admin(me)


def current_site_id() -> str | None:
    return state().host.current_site_id()


def changed_mine() -> None:
    """Commit a change to the caller's inbox, then tell their open streams and forget
    their summary's version (after the commit: a stream reads what is committed)."""
    session().commit()
    live.changed(current_app, [caller_id(required=True)])


def session() -> Session:
    """The request's Session: the one Flask-SQLAlchemy's scoped proxy hands out in this
    app context (end it with ``state().db.session.remove()``)."""
    return state().db.session()


def json_error(
    status: int, code: str, message: str, fields: dict[str, Any] | None = None
) -> tuple[Response, int]:
    """The one error shape: ``{"error": {"code", "message", "fields"?}}``."""
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return jsonify(error=body), status


def api_login_required(
    view: Callable[P, ResponseReturnValue],
) -> Callable[P, ResponseReturnValue]:
    """A guest gets a 401 JSON error, not a redirect to a login page it cannot use."""

    @functools.wraps(view)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ResponseReturnValue:
        if caller_id() is None:
            return json_error(401, "unauthorized", "Sign in to use this API.")
        return view(*args, **kwargs)

    return wrapper


@bp.errorhandler(ValidationError)
def _validation_failed(error: ValidationError) -> tuple[Response, int]:
    flat = flatten_messages(error.messages)
    first_field, first_messages = next(iter(flat.items()))
    return json_error(400, "invalid", f"{first_field}: {first_messages[0]}", fields=flat)


@bp.errorhandler(RateLimitExceeded)
def _rate_limited(exceeded: RateLimitExceeded) -> ResponseReturnValue:
    """Over a rate limit (:mod:`wikinotify.ratelimit`): the API's error, or a page for a
    form, each saying when to come back, as ``Retry-After`` does."""
    seconds = ratelimit.retry_after(state().limiter, exceeded)
    if _is_api_request():
        response = json_error(
            429, "rate_limited", f"Too many requests; try again in {seconds} seconds.")[0]
    else:
        response = Response(render_template("wikinotify/rate_limited.html", seconds=seconds))
    response.headers["Retry-After"] = str(seconds)
    return response, 429


@bp.errorhandler(HTTPException)
def _http_error(error: HTTPException) -> ResponseReturnValue:
    """JSON errors for the API; the wiki's own error pages everywhere else."""
    if _is_api_request():
        code = error.name.lower().replace(" ", "_")
        # Every werkzeug error has a description; the name stands in for a bare one.
        return json_error(error.code or 500, code, error.description or error.name)
    return error


def enabled_here() -> bool:
    """Whether notifications are on for the current request's site: the template global
    ``wikinotify_enabled()``, for a host to hide its own "you will be notified" wording
    and its inbox link where a site has them switched off (docs/rules.md#the-site-switch).
    For a signed-in reader, the badge's remembered paint answers (:func:`badge_state`)."""
    me = caller_id()
    if me is None:
        return site_enabled(session(), current_site_id())
    return badge_state(me)[0]


summary_schema = SummarySchema()


def summary_body(me: str, site_id: str | None, *, enabled: bool | None = None,
                 counts: inbox.Summary | None = None) -> dict[str, Any]:
    """The summary's JSON, as the API and the stream send it; ``enabled`` (the site's
    switch) and ``counts``, when the caller has read them already."""
    if enabled is None:
        enabled = site_enabled(session(), site_id)
    if not enabled:
        counts = inbox.Summary(0, 0, None)
    elif counts is None:
        counts = inbox.summary(session(), me, site_id)
    # vars(), not dataclasses.asdict(), which deep-copies every value (its latest time).
    return dump(summary_schema, {**vars(counts), "enabled": enabled})


def summary_etag(me: str, site_id: str | None, version: str) -> str:
    # The user is part of the tag: two accounts on one browser never share a 304.
    return hashlib.sha256(f"{me}:{site_id}:{version}".encode()).hexdigest()[:32]


def summary_json(me: str, site_id: str | None, version: str | None) -> bytes:
    """The summary's JSON as the API answers it: the one kept in Redis at summary
    ``version`` (:func:`wikinotify.inbox.live.remembered_summary`), else read from the
    database and kept at it. ``version`` is read before the body, so a change committed in
    between leaves the body kept under a version already forgotten, never used."""
    kept = live.remembered_summary(current_app, me, site_id, version) if version else None
    if kept is not None:
        return kept
    data = current_app.json.dumps(summary_body(me, site_id)).encode()
    if version:
        live.remember_summary(current_app, me, site_id, version, data)
    return data


def badge_state(me: str) -> tuple[bool, int]:
    """The current site's switch and ``me``'s unseen count, as the header badge paints
    them. Every page the wiki draws would be a query or two; while the summary's version
    in Redis is unchanged, the summary kept at that version answers (the one the summary
    endpoint answers from), and no SQL is run."""
    site_id = current_site_id()
    body = json.loads(summary_json(me, site_id, live.summary_version(current_app, me)))
    return bool(body["enabled"]), int(body["unseen"])


@bp.record_once
def _check_base_template(setup_state: BlueprintSetupState) -> None:
    """The base template can be loaded from now on (or once init_app has run)."""
    base_template.check(setup_state.app, bp)  # type: ignore[arg-type]


@bp.record_once
def _register_enabled(setup_state: BlueprintSetupState) -> None:
    # A function, not a value: only the templates that ask pay for the query.
    setup_state.app.jinja_env.globals["wikinotify_enabled"] = enabled_here


@bp.context_processor
def _template_globals() -> dict[str, Any]:
    return {
        "wikinotify_base": config("BASE_TEMPLATE"),
        "wikinotify_languages": current_app.config["WIKINOTIFY_LANGUAGES"],
        # A function: only the pages that show the link ask the wiki.
        "wikinotify_is_admin": caller_is_admin,
    }
