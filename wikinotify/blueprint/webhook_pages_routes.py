"""Webhooks and chat targets: the pages (no JavaScript needed).

``/preferences/webhooks`` is a reader's own (her webhooks and chat targets);
``/admin/webhooks`` the site-wide webhooks (administrators). Both post their forms to the
same routes, which do what the API does (:mod:`.webhooks`) and then redirect back with a
flash, except where a signing secret was just made: that answer shows it, once, and is
never a redirect, so the secret is never kept in the session for the next page.
"""

from __future__ import annotations

from typing import Any

from flask import abort, flash, make_response, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_babel import gettext
from flask_wtf import FlaskForm
from marshmallow import ValidationError

from .. import ratelimit
from ..categories import Category
from ..inbox import parse_id
from ..login import caller_id, login_required
from ..models import Endpoint, EndpointKind
from ..outbound import endpoints, verification
from ..refusals import Refusal, refusals, said
from ..schemas import chat_create_schema, load, webhook_create_schema
from ..state import state
from . import webhooks_routes as webhooks
from .admin_routes import admin_required
from .core import bp, session

#: The buttons of each kind of endpoint.
ACTIONS: dict[str, tuple[str, ...]] = {
    EndpointKind.WEBHOOK: ("test", "disable", "enable", "delete", "rotate"),
    EndpointKind.CHAT: ("test", "delete"),
}


def _expired() -> str:
    return gettext("Your session has expired. Reload the page and try again.")


def _categories(owner_id: str | None) -> list[Category]:
    registry = state().registry
    return [registry[key] for key in webhooks.choosable(owner_id)]


def _render(
    scope: str, *, secret: tuple[Endpoint, str] | None = None, error: str | None = None,
    entered: dict[str, Any] | None = None, refused: list[Refusal] | None = None,
    refused_form: str = "webhook", code: int = 200,
) -> ResponseReturnValue:
    """The page of ``scope`` (``user`` or ``site``); with a secret made just now, or a
    refusal and what was typed (``refused``, each field's sentence, in ``refused_form``:
    ``webhook`` or ``chat``)."""
    owner_id = caller_id(required=True) if scope == "user" else None
    hooks = endpoints.list_endpoints(session(), owner_id, EndpointKind.WEBHOOK)
    chats = endpoints.list_endpoints(session(), owner_id, EndpointKind.CHAT) if owner_id else []
    categories = _categories(owner_id)
    page = make_response(render_template(
        "wikinotify/webhooks.html",
        scope=scope,
        form=FlaskForm(),
        webhooks=hooks,
        chats=chats,
        categories=categories,
        titles={c.key: gettext(c.title) for c in categories},
        secret=secret,
        error=error,
        entered=entered or {},
        refused=refused or [],
        refused_form=refused_form,
    ), code)
    if secret is not None:
        # The one answer that shows the secret: no cache (the browser's, a proxy's) keeps it.
        page.headers["Cache-Control"] = "no-store"
    return page


def _page_of(endpoint: Endpoint) -> str:
    if endpoint.owner_id is None:
        return url_for(".admin_webhooks_page")
    return url_for(".webhooks_page")


def _scope_of_form() -> str:
    return "site" if request.form.get("scope") == "site" else "user"


@bp.get("/preferences/webhooks")
@login_required
def webhooks_page() -> ResponseReturnValue:
    return _render("user")


@bp.get("/admin/webhooks")
@admin_required
def admin_webhooks_page() -> ResponseReturnValue:
    return _render("site")


@bp.post("/webhooks")
@ratelimit.sends
@login_required
def webhook_create_form() -> ResponseReturnValue:
    """The "Add a webhook" form: the API's checks and save; the answer shows the secret."""
    scope = _scope_of_form()
    if scope == "site" and not state().host.is_admin(caller_id(required=True)):
        abort(403)
    if not FlaskForm().validate_on_submit():
        return _render(scope, error=_expired(), code=400)
    entered = {
        "url": request.form.get("url", ""),
        "description": request.form.get("description", ""),
        "categories": request.form.getlist("categories"),
        "scope": scope,
    }
    try:
        made = webhooks.create_webhook(load(webhook_create_schema(), entered))
    except ValidationError as invalid:
        return _render(scope, refused=refusals(invalid), entered=entered, code=400)
    except endpoints.TooMany as full:
        return _render(scope, error=webhooks.too_many(full), entered=entered, code=409)
    return _render(scope, secret=made)


@bp.post("/webhooks/<endpoint_id>/<action>")
@ratelimit.sends
@login_required
def webhook_action_form(endpoint_id: str, action: str) -> ResponseReturnValue:
    """A webhook's buttons: test, disable, enable, delete, rotate its secret."""
    return _act(EndpointKind.WEBHOOK, endpoint_id, action)


@bp.post("/chat/<endpoint_id>/<action>")
@ratelimit.sends
@login_required
def chat_action_form(endpoint_id: str, action: str) -> ResponseReturnValue:
    """A chat target's buttons: test, delete."""
    return _act(EndpointKind.CHAT, endpoint_id, action)


def _act(kind: str, endpoint_id: str, action: str) -> ResponseReturnValue:
    """What a button does, as the API does it; then back to the page with a flash (a new
    secret is shown on the answer itself)."""
    endpoint = webhooks.found(endpoint_id, kind)
    if endpoint is None or action not in ACTIONS[kind]:
        abort(404)
    scope = endpoints.scope_of(endpoint)
    if not FlaskForm().validate_on_submit():
        return _render(scope, error=_expired(), code=400)
    back = _page_of(endpoint)
    if action == "rotate":
        try:
            secret = webhooks.rotate(endpoint)
        except endpoints.RotationPending as pending:
            return _render(scope, error=webhooks.rotation_pending(pending), code=409)
        return _render(scope, secret=(endpoint, secret))
    if action == "test":
        _test(endpoint)
    elif action == "delete":
        webhooks.delete(endpoint)
        flash(gettext("The webhook is deleted.") if kind == EndpointKind.WEBHOOK
              else gettext("The chat target is deleted."))
    else:
        webhooks.change(endpoint, {"enabled": action == "enable"})
        flash(gettext("The webhook is enabled.") if action == "enable"
              else gettext("The webhook is disabled."))
    return redirect(back)


def _test(endpoint: Endpoint) -> None:
    delivery = webhooks.send_test(endpoint)
    if delivery is None:
        flash(gettext("It is disabled: enable it before testing it."))
    elif delivery.type == verification.TYPE:
        flash(gettext("The verification event is sent again: answer it with its challenge."))
    else:
        flash(gettext("A test message is on its way."))


@bp.post("/chat")
@ratelimit.sends
@login_required
def chat_create_form() -> ResponseReturnValue:
    if not FlaskForm().validate_on_submit():
        return _render("user", error=_expired(), code=400)
    entered = {"url": request.form.get("url", ""),
               "description": request.form.get("description", ""),
               "categories": request.form.getlist("categories") or None}
    try:
        webhooks.create_chat(load(chat_create_schema(), entered))
    except ValidationError as invalid:
        return _render("user", refused=refusals(invalid, {"url": "Apprise URL"}),
                       refused_form="chat", entered={"chat": entered}, code=400)
    except endpoints.TooMany as full:
        return _render("user", error=webhooks.too_many(full), entered={"chat": entered},
                       code=409)
    flash(gettext("The chat target is saved."))
    return redirect(url_for(".webhooks_page"))


@bp.get("/webhooks/<endpoint_id>/deliveries")
@login_required
def deliveries_page(endpoint_id: str) -> ResponseReturnValue:
    """An endpoint's deliveries, newest first, fifty a page (an "Older" link)."""
    endpoint_number = parse_id(endpoint_id)
    kind = request.args.get("kind", EndpointKind.WEBHOOK)
    endpoint = None
    if endpoint_number is not None and kind in tuple(EndpointKind):
        endpoint = endpoints.find(session(), webhooks.caller(), endpoint_number, kind)
    if endpoint is None:
        abort(404)
    try:
        before = endpoints.parse_cursor(request.args.get("cursor"))
    except ValidationError as invalid:
        abort(400, said(invalid))
    page = endpoints.deliveries(session(), webhooks.caller(), endpoint.id, before=before)
    return render_template(
        "wikinotify/deliveries.html", endpoint=endpoint, page=page, back=_page_of(endpoint)
    )
