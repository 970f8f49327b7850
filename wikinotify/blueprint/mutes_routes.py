"""Mutes: the JSON API, the form the page's button posts (works without JavaScript), and
the template globals behind ``wikinotify/mute_button.html`` and the preferences' list.

No route-level permissions: every signed-in account manages its own mutes, and every
statement names the caller's id. Someone else's mute answers as one that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import abort, request, url_for
from flask.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue
from flask_babel import gettext
from flask_wtf import FlaskForm
from flask_wtf.csrf import generate_csrf
from marshmallow import ValidationError
from werkzeug.urls import iri_to_uri

from .. import ratelimit, refusals
from ..host import PageSnapshot
from ..login import caller_id, login_required
from ..models import Mute, MuteKind
from ..openapi import WRITE_ERRORS, operation
from ..preferences import mutes
from ..schemas import MuteRequestSchema, MutesSchema, dump, load
from ..state import state
from .core import (
    api_login_required,
    bp,
    json_body,
    json_error,
    redirect_back,
    session,
)

mute_request_schema = MuteRequestSchema()
mutes_schema = MutesSchema()


def _readable_pages(page_ids: Sequence[str]) -> dict[str, PageSnapshot]:
    """The pages of ``page_ids`` that exist and the caller may read now: one look-up."""
    host = state().host
    viewer = host.user(caller_id(required=True))
    if viewer is None or not page_ids:
        return {}
    return {page_id: page for page_id, page in host.pages(page_ids).items()
            if host.check_access(viewer.group_ids, "read:pages", page)}


def _may_mute(kind: str, target_id: str) -> bool:
    """Whether the caller may mute it: a person the wiki knows, or a page she may read. A
    mute of nothing is never stored, and a page she cannot read answers as a missing one,
    so muting tells nobody which hidden pages exist (she gains nothing by muting one)."""
    if kind == MuteKind.PAGE:
        return target_id in _readable_pages([target_id])
    return target_id in state().host.users([target_id])


@dataclass(frozen=True)
class NamedMute:
    """A mute as the caller is shown it (:class:`MuteSchema`, the preferences' list)."""

    kind: str
    id: str
    #: The page's title or the person's name; ``None`` where she may no longer see it.
    name: str | None
    created_at: datetime


def _named(found: Sequence[Mute]) -> list[NamedMute]:
    """The caller's mutes with the page's title (where she may still read the page) or
    the person's name: one batched look-up of each."""
    pages = _readable_pages([m.target_id for m in found if m.kind == MuteKind.PAGE])
    people = state().host.users([m.target_id for m in found if m.kind == MuteKind.USER])

    def name(mute: Mute) -> str | None:
        if mute.kind == MuteKind.USER:
            person = people.get(mute.target_id)
            return person.display_name if person else None
        page = pages.get(mute.target_id)
        return page.get("title") if page else None

    return [NamedMute(m.kind, m.target_id, name(m), m.created_at) for m in found]


# -- API ----------------------------------------------------------------------------------


@bp.get("/api/mutes")
@operation(
    summary="The caller's mutes",
    description="Pages and people the caller muted, newest first: a muted page tells "
    "the caller nothing from any category, a muted person's actions tell the caller "
    "nothing. `name` is the page's title (null where the caller may no longer read "
    "it) or the person's name.",
    ok={200: ("The mutes.", MutesSchema)},
    errors=(401,),
)
@api_login_required
def api_mutes() -> ResponseReturnValue:
    found = mutes.list_mutes(session(), caller_id(required=True))
    return dump(mutes_schema, {"items": _named(found)})


@bp.put("/api/mutes")
@operation(
    summary="Mute a page or a person",
    description="Muting twice is muting once. Mail still waiting for the caller's "
    "unread entries about that page or person is cancelled.",
    body=MuteRequestSchema,
    ok={204: ("Muted.", None)},
    errors=(*WRITE_ERRORS, 404),
    error_text={404: "The wiki has no such page or person, or the caller may not "
                "read the page (`not_found`): a hidden page answers exactly as a "
                "missing one."},
)
@ratelimit.writes
@api_login_required
def api_mute() -> ResponseReturnValue:
    body = load(mute_request_schema, json_body())
    if not _may_mute(body["kind"], body["id"]):
        # Well-formed, but naming nothing she may see: as a missing resource answers.
        return json_error(404, "not_found", f"No such {body['kind']}.")
    mutes.mute(session(), caller_id(required=True), body["kind"], body["id"])
    session().commit()
    return "", 204


@bp.delete("/api/mutes/<kind>/<target_id>")
@operation(
    summary="Unmute a page or a person",
    parameters=[
        {"in": "path", "name": "kind", "required": True,
         "schema": {"type": "string", "enum": ["page", "user"]}},
        {"in": "path", "name": "target_id", "required": True,
         "description": "The page's or the person's id.", "schema": {"type": "string"}},
    ],
    ok={204: ("Unmuted.", None)},
    errors=(*WRITE_ERRORS, 404),
    error_text={404: "The caller has no such mute (`not_found`): someone else's "
                "answers exactly as one that does not exist."},
)
@ratelimit.writes
@api_login_required
def api_unmute(kind: str, target_id: str) -> ResponseReturnValue:
    if not mutes.unmute(session(), caller_id(required=True), kind, target_id):
        return json_error(404, "not_found", "No such mute.")
    session().commit()
    return "", 204


# -- the buttons (no JavaScript needed) ---------------------------------------------------


@bp.post("/mutes")
@ratelimit.writes
@login_required
def mute_form() -> ResponseReturnValue:
    """Mute (``action=mute``) or unmute (``action=unmute``) ``kind``/``id``."""
    if not FlaskForm().validate_on_submit():  # the buttons' form carries only its token
        abort(400, gettext("Your session has expired. Reload the page and try again."))
    form = {"kind": request.form.get("kind", ""), "id": request.form.get("id", "")}
    me = caller_id(required=True)
    if request.form.get("action") == "unmute":
        mutes.unmute(session(), me, form["kind"], form["id"])
    else:
        try:
            body = load(mute_request_schema, form)
        except ValidationError as invalid:
            abort(400, refusals.said(invalid))
        if not _may_mute(body["kind"], body["id"]):
            abort(404)
        mutes.mute(session(), me, body["kind"], body["id"])
    session().commit()
    return redirect_back("/")  # the page the button was on


# -- template globals ---------------------------------------------------------------------


def mute_button(kind: str, target_id: Any) -> dict[str, Any]:
    """What ``wikinotify/mute_button.html`` draws for ``kind``/``target_id``; ``show`` is
    false for a guest."""
    me = caller_id()
    target = str(target_id)
    if me is None:
        return {"show": False}
    return {
        "show": True,
        "kind": kind,
        "id": target,
        "muted": mutes.is_muted(session(), me, kind, target),
        "action": url_for("wikinotify.mute_form"),
        "csrf_token": generate_csrf(),
        # As a URI: a path's spaces or accents, decoded by werkzeug, would fail the
        # check of redirect_back and send the reader home instead.
        "next": iri_to_uri(request.full_path.rstrip("?")),
    }


def my_mutes() -> dict[str, Any]:
    """The caller's mutes as the preferences page lists them, and the undo's token."""
    me = caller_id()
    found = _named(mutes.list_mutes(session(), me)) if me else []
    return {"mutes": found, "csrf_token": generate_csrf()}


@bp.record_once
def _register_globals(setup_state: BlueprintSetupState) -> None:
    setup_state.app.jinja_env.globals["wikinotify_mute_button"] = mute_button
    setup_state.app.jinja_env.globals["wikinotify_mutes"] = my_mutes
