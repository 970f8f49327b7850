"""The blueprint object and what every route shares: who is asking, JSON errors."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from flask_login import current_user
from marshmallow import ValidationError
from werkzeug.exceptions import HTTPException

from ..schemas import flatten_messages
from ..settings import site_enabled
from ..state import config, state

_PACKAGE_DIR = os.path.dirname(os.path.dirname(__file__))

#: Registered by the wiki: ``app.register_blueprint(blueprint)`` (or with its own prefix).
bp = Blueprint(
    "wikinotify",
    __name__,
    url_prefix="/_notifications",
    template_folder=os.path.join(_PACKAGE_DIR, "templates"),
    static_folder=os.path.join(_PACKAGE_DIR, "static", "wikinotify"),
    static_url_path="/static",
)


@bp.record_once
def _exempt_from_global_csrf(setup_state) -> None:
    """Leave wikinotify's routes to their own CSRF defence when the wiki protects every
    POST with Flask-WTF's ``CSRFProtect``.

    The forms validate their own token (``FlaskForm``); the JSON API only changes
    anything on PUT and DELETE, which no other origin can send without a CORS preflight;
    and the RFC 8058 one-click POST comes from a mail client that has no token to send.
    """
    csrf = setup_state.app.extensions.get("csrf")
    if csrf is not None:
        csrf.exempt(bp)


def user_id() -> str | None:
    """The caller's account id, or ``None`` for a guest."""
    if current_user and current_user.is_authenticated:
        return str(current_user.get_id())
    return None


def current_site_id() -> str | None:
    return state().host.current_site_id()


def session():
    return state().db.session


def json_error(status: int, code: str, message: str, fields: dict | None = None):
    """The one error shape: ``{"error": {"code", "message", "fields"?}}``."""
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return jsonify(error=body), status


def api_login_required(view: Callable) -> Callable:
    """A guest gets a 401 JSON error, not a redirect to a login page it cannot use."""

    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        if user_id() is None:
            return json_error(401, "unauthorized", "Sign in to use this API.")
        return view(*args, **kwargs)

    return wrapper


@bp.errorhandler(ValidationError)
def _validation_failed(error: ValidationError):
    flat = flatten_messages(error.messages)
    first_field, first_messages = next(iter(flat.items()))
    return json_error(400, "invalid", f"{first_field}: {first_messages[0]}", fields=flat)


@bp.errorhandler(HTTPException)
def _http_error(error: HTTPException):
    """JSON errors for the API; the wiki's own error pages everywhere else."""
    if "/api/" in request.path:
        code = error.name.lower().replace(" ", "_")
        return json_error(error.code or 500, code, error.description)
    return error


@bp.context_processor
def _template_globals() -> dict[str, Any]:
    return {
        "wikinotify_base": config("BASE_TEMPLATE"),
        "wikinotify_site_enabled": site_enabled(session(), current_site_id()),
        "wikinotify_languages": current_app.config["WIKINOTIFY_LANGUAGES"],
    }
