"""Announcements (docs/rules.md#announcements): Admin → Notifications → Announcements, a page
that works without JavaScript, and its JSON API. Administrators only, as the rest of the
administration (:func:`~.admin_routes.api_admin_required`): a guest is asked to sign in,
anyone else gets a 403.

Publishing writes one row of wikinotify's, the event (``emit``'s INSERT), beside the
wiki's audit entry (``Host.audit``, in the same transaction); the fan-out does the rest.
Withdrawing is audited too.
"""

from __future__ import annotations

from typing import Any

from flask import abort, current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_babel import gettext
from flask_wtf import FlaskForm
from markupsafe import Markup
from marshmallow import ValidationError

from .. import announcements, ratelimit
from ..categories import announcement
from ..inbox import live, parse_id
from ..instance_settings import site_enabled
from ..linkify import linkify
from ..login import caller_id
from ..openapi import WRITE_ERRORS, operation, path_id
from ..schemas import dump, flatten_messages, load
from ..schemas.announcements import (
    AnnouncementCreateSchema,
    AnnouncementListSchema,
    AnnouncementSchema,
)
from ..state import state
from .admin_routes import admin_required, api_admin_required
from .core import bp, current_site_id, json_body, json_error, session

create_schema = AnnouncementCreateSchema()
announcement_schema = AnnouncementSchema()
list_schema = AnnouncementListSchema()

#: The 404 of a wiki whose categories (``WIKINOTIFY_CATEGORIES``) leave announcements out.
NOT_HERE = "This wiki has no announcements (`not_found`): its categories leave them out."

ANNOUNCEMENT_ID = path_id("announcement_id", "An announcement's id. Anything that is not "
                          "one answers 404 exactly as a missing one.")


def announcements_on() -> bool:
    """Whether this wiki has the category (``WIKINOTIFY_CATEGORIES`` may leave it out):
    without it the routes answer as routes that do not exist."""
    return announcement.KEY in state().registry


def _absent_without_the_category() -> None:
    if not announcements_on():
        abort(404)


class SiteSwitchedOff(Exception):
    """The announcement's site has its notifications switched off: nothing was written."""


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """The loaded body, its site and groups checked against the wiki: a
    ``ValidationError`` naming the field otherwise."""
    host = state().host
    site_id = values.get("site_id") or current_site_id()
    if site_id not in {site.id for site in host.sites()}:
        raise ValidationError({"siteId": ["No site has this id."]})
    groups = values["audience"].get("groups")
    if groups is not None:
        known = {group_id for group_id, _ in host.announcement_groups()}
        wrong = {str(i): ["No group has this id."] for i, g in enumerate(groups) if g not in known}
        if wrong:
            raise ValidationError({"audience": {"groups": wrong}})
        groups = list(dict.fromkeys(groups))
    return {**values, "site_id": site_id, "groups": groups}


def _publish(values: dict[str, Any]) -> announcements.Announcement:
    """Emit, audit and commit: one path for the API and the form."""
    me = caller_id(required=True)
    if not site_enabled(session(), values["site_id"]):
        raise SiteSwitchedOff()
    announcement_id = announcements.publish(
        author_id=me, site_id=values["site_id"], title=values["title"], body=values["body"],
        groups=values["groups"], important=values["important"])
    if announcement_id is None:  # emit logged why
        raise RuntimeError("the announcement's event could not be written")
    state().host.audit("publishAnnouncement", actor_id=me, kind="announcement", details={
        "id": announcement_id, "siteId": values["site_id"], "groups": values["groups"],
        "important": values["important"]})
    session().commit()
    found = announcements.find(session(), announcement_id)
    assert found is not None, "just committed"
    return found


def _withdraw(raw_id: str) -> bool:
    """Withdraw (batch by batch, each batch's readers' open pages told after its commit),
    audit, commit; ``False`` for an id that names no announcement."""
    announcement_id = parse_id(raw_id)
    removed = None if announcement_id is None else announcements.withdraw(
        session(), announcement_id, lambda readers: live.changed(current_app, readers))
    if removed is None:
        return False
    state().host.audit("withdrawAnnouncement", actor_id=caller_id(), kind="announcement",
                       details={"id": announcement_id, "unreadRemoved": removed})
    session().commit()
    # Its entries already read stay, hidden from every list from now on: pages kept with
    # them, anyone's, go (docs/rules.md#kept-pages).
    live.wiki_changed(current_app)
    return True


# -- API ----------------------------------------------------------------------------------


@bp.get("/api/admin/announcements")
@operation(
    summary="The newest announcements (administrators)",
    description=f"At most {announcements.LISTED}, newest first, withdrawn ones included.",
    ok={200: ("The announcements.", AnnouncementListSchema)},
    errors=(401, 403, 404),
    error_text={404: NOT_HERE},
)
@api_admin_required
def list_announcements_api() -> ResponseReturnValue:
    _absent_without_the_category()
    return dump(list_schema, {"items": announcements.listed(session())})


@bp.post("/api/admin/announcements")
@operation(
    summary="Publish an announcement (administrators)",
    description="To everyone on the site (`{\"everyone\": true}`) or to the members of "
    "some of the wiki's groups (`{\"groups\": [ids]}`); `siteId` defaults to the current "
    "site. Plain text: the body's web addresses become links when it is shown, and "
    "anything written like markup is shown as written. Readers who cannot read the site "
    "are not told, nor is its author. `important` puts it in every reader's inbox "
    "whatever they chose. A refused body publishes nothing; the 400 names the field.",
    body=AnnouncementCreateSchema,
    ok={201: ("The announcement, waiting for its fan-out.", AnnouncementSchema)},
    errors=(*WRITE_ERRORS, 403, 404, 409),
    error_text={409: "Notifications are switched off on that site (`site_switched_off`): "
                "nothing was published.", 404: NOT_HERE},
)
@ratelimit.writes
@api_admin_required
def create_announcement_api() -> ResponseReturnValue:
    _absent_without_the_category()
    values = _checked(load(create_schema, json_body()))
    try:
        found = _publish(values)
    except SiteSwitchedOff:
        return json_error(409, "site_switched_off",
                          "Notifications are switched off on this site.")
    return dump(announcement_schema, found), 201


@bp.delete("/api/admin/announcements/<announcement_id>")
@operation(
    summary="Withdraw an announcement (administrators)",
    description="Its unread entries are removed, with the mail they were waiting for, "
    "and a fan-out still running stops; entries already read stay. An entry a fan-out "
    "writes after the withdrawal is never shown or sent. Withdrawing again changes nothing.",
    parameters=[ANNOUNCEMENT_ID],
    ok={204: ("Withdrawn.", None)},
    errors=(*WRITE_ERRORS, 403, 404),
    error_text={404: "No announcement has this id, or this wiki's categories leave "
                "announcements out (`not_found`)."},
)
@ratelimit.writes
@api_admin_required
def withdraw_announcement_api(announcement_id: str) -> ResponseReturnValue:
    _absent_without_the_category()
    if not _withdraw(announcement_id):
        return json_error(404, "not_found", "No such announcement.")
    return "", 204


# -- the page (works without JavaScript) -------------------------------------------------


def _render(form: FlaskForm, *, entered: dict[str, Any] | None = None,
            errors: dict[str, list[str]] | None = None, error: str | None = None,
            code: int = 200) -> ResponseReturnValue:
    host = state().host
    return render_template(
        "wikinotify/announcements.html",
        form=form,
        entered=entered or {"audience": "everyone", "groups": [], "site": current_site_id()},
        # By the field the form shows: "audience.groups.0" is the audience's.
        errors={name.split(".")[0]: messages for name, messages in (errors or {}).items()},
        error=error,
        items=announcements.listed(session()),
        groups=list(host.announcement_groups()),
        group_names=dict(host.announcement_groups()),
        sites=list(host.sites()),
        limits={"title": announcements.TITLE_LENGTH, "body": announcements.BODY_LENGTH},
    ), code


def _form_body() -> tuple[dict[str, Any], dict[str, Any]]:
    """The form as it was typed (to show again) and as the API's body."""
    form = request.form
    entered = {"title": form.get("title", ""), "body": form.get("body", ""),
               "audience": form.get("audience", "everyone"), "groups": form.getlist("groups"),
               "site": form.get("site") or current_site_id(),
               "important": "important" in form}
    audience: dict[str, Any] = (
        {"groups": entered["groups"]} if entered["audience"] == "groups" else {"everyone": True})
    body = {"title": entered["title"], "body": entered["body"], "audience": audience,
            "important": entered["important"]}
    if entered["site"]:
        body["siteId"] = entered["site"]
    return entered, body


def _expired(form: FlaskForm) -> ResponseReturnValue:
    message = gettext("Your session has expired. Reload the page and try again.")
    return _render(form, error=message, code=400)


@bp.get("/admin/announcements")
@admin_required
def announcements_page() -> ResponseReturnValue:
    _absent_without_the_category()
    return _render(FlaskForm())


@bp.post("/admin/announcements")
@ratelimit.writes
@admin_required
def announcements_form() -> ResponseReturnValue:
    """The API's publish, then Post/Redirect/Get with a flash."""
    _absent_without_the_category()
    form = FlaskForm()
    if not form.validate_on_submit():
        return _expired(form)
    entered, body = _form_body()
    try:
        _publish(_checked(load(create_schema, body)))
    except ValidationError as invalid:
        return _render(form, entered=entered, errors=flatten_messages(invalid.messages),
                       error=gettext("Nothing was published: correct the fields marked "
                                     "below."), code=400)
    except SiteSwitchedOff:
        return _render(form, entered=entered, code=409, error=gettext(
            "Nothing was published: notifications are switched off on this site."))
    flash(gettext("The announcement is on its way."))
    return redirect(url_for(".announcements_page"))


@bp.post("/admin/announcements/<announcement_id>/withdraw")
@ratelimit.writes
@admin_required
def withdraw_announcement_form(announcement_id: str) -> ResponseReturnValue:
    _absent_without_the_category()
    form = FlaskForm()
    if not form.validate_on_submit():
        return _expired(form)
    if not _withdraw(announcement_id):
        abort(404)
    flash(gettext("The announcement is withdrawn."))
    return redirect(url_for(".announcements_page"))




@bp.app_template_filter("wn_linkify")
def _linkify(text: str) -> Markup:
    """An announcement's body as HTML (:func:`wikinotify.linkify.linkify`)."""
    return linkify(text)
