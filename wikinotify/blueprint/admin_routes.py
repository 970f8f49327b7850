"""Admin → Notifications (docs/rules.md#admin-notifications): the page (works without JavaScript)
and its JSON API.

Administrators only, as the wiki says through ``Host.is_admin``: a guest is asked to
sign in (a 401 JSON error on the API), anyone else gets a 403. A save that changes
something is audited once, with the names of the fields that changed, then committed.
The unsubscribe secret is never part of an answer: every body goes through a schema
that has no field for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ParamSpec

from flask import abort, current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_babel import gettext
from flask_wtf import FlaskForm
from marshmallow import Schema, ValidationError

from .. import admin, ratelimit, retries
from ..categories.announcement import KEY as ANNOUNCEMENT_KEY
from ..inbox import live, parse_id
from ..login import caller_id, login_required
from ..models import utcnow
from ..openapi import WRITE_ERRORS, operation, path_id
from ..refusals import Refusal, refusals
from ..retries import Kind
from ..schemas import dump, load
from ..schemas.administration import (
    SETTING_RANGES,
    AdminSettingsSchema,
    admin_settings_update_schema,
)
from ..state import State, state
from .core import (
    api_login_required,
    bp,
    caller_is_admin,
    form_integer,
    json_body,
    json_error,
    session,
)

admin_settings_schema = AdminSettingsSchema()
P = ParamSpec("P")

# The page's form is Flask-WTF's own, for its CSRF token only: the fields are read by name
# and validated by the API's schema.


def api_admin_required(
    view: Callable[P, ResponseReturnValue],
) -> Callable[P, ResponseReturnValue]:
    """A guest gets a 401 JSON error, a signed-in non-administrator a 403 one."""

    @functools.wraps(view)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ResponseReturnValue:
        if not caller_is_admin():
            return json_error(403, "forbidden", "Only administrators may use this API.")
        return view(*args, **kwargs)

    return api_login_required(wrapper)


def admin_required(
    view: Callable[P, ResponseReturnValue],
) -> Callable[P, ResponseReturnValue]:
    """A guest goes to the wiki's sign-in page, a signed-in non-administrator gets a 403."""

    @functools.wraps(view)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ResponseReturnValue:
        if not caller_is_admin():
            abort(403)
        return view(*args, **kwargs)

    return login_required(wrapper)


def _update_schema(st: State) -> Schema:
    """The body of a save: it names the wiki's sites (so does the document)."""
    return admin_settings_update_schema(tuple(site.id for site in st.host.sites()))


def _load(data: Any) -> dict[str, Any]:
    """The body as the schema reads it, and a retention digests allow: a
    ``ValidationError`` naming the field otherwise."""
    values = load(_update_schema(state()), data)
    admin.check_retention(session(), values)
    return values


def _status() -> dict[str, Any]:
    return admin.status(session(), state().host, now=utcnow())


def _settings_view(sites: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The editable half of the screen: the three settings and every site's switch
    (``sites`` when the caller already has them from the status)."""
    if sites is None:
        sites = admin.sites(session(), state().host)
    return {**admin.instance_settings_values(session()), "sites": sites}


def _save(values: dict[str, Any]) -> list[str]:
    """Store, audit what changed, commit: one path for the API and the form."""
    changed = admin.update_instance_settings(session(), values)
    if changed:
        state().host.audit(
            "updateNotificationSettings",
            actor_id=caller_id(),
            kind="admin",
            details={"fields": changed},
        )
    session().commit()
    if any(name.startswith("site:") for name in changed):
        live.changed_everyone(current_app)  # every badge on that site shows or hides
    return changed


#: What the page says once a retry is done, in the administrator's language.
DONE = {
    Kind.EVENT: lambda: gettext("The event will be fanned out again within a minute."),
    Kind.MAIL: lambda: gettext("The mail will be sent again within a minute."),
    Kind.DELIVERY: lambda: gettext("The delivery will be made again within a minute."),
}


def _retry(what: Kind, raw_id: str) -> bool:
    """Retry a failed item, audit it, commit, and kick the run that takes it: one path for
    the API and the form. ``False`` (nothing done) for anything that is not a failed
    item's id, a malformed id included."""
    item_id = parse_id(raw_id)
    actor = retries.Actor(caller_id())
    if item_id is None or not retries.retry(session(), state().host, what, item_id, actor):
        return False
    session().commit()
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    retries.RETRIES[what].kick(current_app._get_current_object())  # type: ignore[attr-defined]
    return True


def _retried(what: Kind, raw_id: str) -> ResponseReturnValue:
    """The API's answer: a missing id and one that is not a failed item's answer alike."""
    if not _retry(what, raw_id):
        return json_error(404, "not_found", retries.RETRIES[what].missing)
    return "", 204


def _retried_form(what: Kind, raw_id: str) -> ResponseReturnValue:
    """The page's retry button: the API's retry, then Post/Redirect/Get with a flash."""
    form = FlaskForm()
    if not form.validate_on_submit():
        message = gettext("Your session has expired. Reload the page and try again.")
        return _render(form, error=message, code=400)
    if not _retry(what, raw_id):
        abort(404)
    flash(DONE[what]())
    return redirect(url_for(".admin_page"))


# -- API ----------------------------------------------------------------------------------


@bp.get("/api/admin/settings")
@operation(
    summary="Instance settings, site switches and delivery status (administrators)",
    ok={200: ("The settings and `status`.", AdminSettingsSchema)},
    errors=(401, 403),
)
@api_admin_required
def get_admin_settings() -> ResponseReturnValue:
    status = _status()
    return dump(admin_settings_schema, {**_settings_view(status["sites"]), "status": status})


@bp.put("/api/admin/settings")
@operation(
    summary="Save the instance settings and site switches (administrators)",
    description="The three settings are required, each a JSON integer written "
    "without a fraction (`100.0` is refused); `sites` lists the switches to change, "
    "each site at most once. A refused body stores nothing; the 400 names the field.",
    body=_update_schema,
    ok={200: ("The settings as stored (without `status`).", AdminSettingsSchema)},
    errors=(*WRITE_ERRORS, 403),
)
@api_admin_required
def put_admin_settings() -> ResponseReturnValue:
    """Validate the whole body first (the blueprint answers a ``ValidationError`` with a
    400 naming the field), so a bad request stores nothing."""
    _save(_load(json_body()))
    return dump(admin_settings_schema, _settings_view())


@bp.post("/api/admin/events/<event_id>/retry")
@operation(
    summary="Retry a failed event (administrators)",
    description="An event whose fan-out failed on every attempt (a dead letter, "
    "listed in the status's `failedEvents`) gets its attempts back and is fanned out "
    "again, from where it stopped. No body is needed.",
    parameters=[path_id("event_id", "A failed event's id. The id of an event that has not "
                        "failed, or anything that is not an id, answers 404 exactly as "
                        "a missing one.")],
    ok={204: ("The event waits for the next fan-out.", None)},
    errors=(*WRITE_ERRORS, 403, 404),
    error_text={404: "No failed event has this id (`not_found`)."},
)
@ratelimit.writes
@api_admin_required
def api_retry_event(event_id: str) -> ResponseReturnValue:
    return _retried(Kind.EVENT, event_id)


@bp.post("/api/admin/mails/<mail_id>/retry")
@operation(
    summary="Retry a failed mail (administrators)",
    description="A mail given up on (its rows listed in the status's `failures`; any of "
    "them names it) is due again at once with its attempts back: all its rows, but those "
    "read since, whose mail reading cancelled. No body is needed.",
    parameters=[path_id("mail_id", "A failed mail's row id. Any other id, or anything "
                        "that is not an id, answers 404 exactly as a missing one.")],
    ok={204: ("The mail waits for the next mail run.", None)},
    errors=(*WRITE_ERRORS, 403, 404),
    error_text={404: "No failed mail has a row of this id (`not_found`)."},
)
@ratelimit.writes
@api_admin_required
def api_retry_mail(mail_id: str) -> ResponseReturnValue:
    return _retried(Kind.MAIL, mail_id)


@bp.post("/api/admin/deliveries/<delivery_id>/retry")
@operation(
    summary="Retry a failed webhook or chat delivery (administrators)",
    description="A delivery given up on (listed in the status's `failedDeliveries`) is "
    "due again at once with its attempts back, under the same `webhook-id`; it is checked "
    "again before it is sent, as every delivery is. No body is needed.",
    parameters=[path_id("delivery_id", "A failed delivery's id. Any other id, or "
                        "anything that is not an id, answers 404 exactly as a missing one.")],
    ok={204: ("The delivery waits for the next delivery run.", None)},
    errors=(*WRITE_ERRORS, 403, 404),
    error_text={404: "No failed delivery has this id (`not_found`)."},
)
@ratelimit.writes
@api_admin_required
def api_retry_delivery(delivery_id: str) -> ResponseReturnValue:
    return _retried(Kind.DELIVERY, delivery_id)


# -- the page (works without JavaScript) -------------------------------------------------


def _render(
    form: FlaskForm,
    *,
    entered: dict[str, Any] | None = None,
    refused: list[Refusal] | None = None,
    error: str | None = None,
    code: int = 200,
) -> ResponseReturnValue:
    """The page; after a refused save, with what was typed and what was wrong with it."""
    status = _status()
    values = entered or _settings_view(status["sites"])
    return render_template(
        "wikinotify/admin.html",
        form=form,
        values=values,
        sites=status["sites"],
        checked={site["id"]: site["enabled"] for site in values["sites"]},
        status=status,
        oldest_wait=_seconds(status["outbox"]["oldestAgeSeconds"]),
        cron_seen=_seconds(status["vitals"].cron_last_seen_age),
        recipients=_names({failure["userId"] for failure in status["failures"]}
                          | {d["ownerId"] for d in status["failedDeliveries"] if d["ownerId"]}),
        ranges=SETTING_RANGES,
        refused=refused or [],
        announcements=ANNOUNCEMENT_KEY in state().registry,
        error=error,
    ), code


def _seconds(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _names(user_ids: set[str]) -> dict[str, str]:
    """Display names of the failures' recipients, in one lookup; a gone account shows its id."""
    users = state().host.users(sorted(user_ids)) if user_ids else {}
    return {user_id: facts.display_name for user_id, facts in users.items()}


def _form_values() -> dict[str, Any]:
    """The form as the API's body: unchecked boxes are not sent, so every site is listed."""
    values: dict[str, Any] = {
        name: form_integer(request.form.get(name, "")) for name in SETTING_RANGES
    }
    values["sites"] = [
        {"id": site.id, "enabled": f"site.{site.id}" in request.form}
        for site in state().host.sites()
    ]
    return values


@bp.get("/admin")
@admin_required
def admin_page() -> ResponseReturnValue:
    return _render(FlaskForm())


@bp.post("/admin")
@admin_required
def admin_form() -> ResponseReturnValue:
    """The same save as the API, then Post/Redirect/Get with a flash."""
    form = FlaskForm()
    if not form.validate_on_submit():
        message = gettext("Your session has expired. Reload the page and try again.")
        return _render(form, error=message, code=400)
    entered = _form_values()
    try:
        values = _load(entered)
    except ValidationError as invalid:
        return _render(form, entered=entered, refused=refusals(invalid), code=400)
    if _save(values):
        flash(gettext("The notification settings are saved."))
    else:
        flash(gettext("Nothing changed."))
    return redirect(url_for(".admin_page"))


@bp.post("/admin/events/<event_id>/retry")
@ratelimit.writes
@admin_required
def retry_event_form(event_id: str) -> ResponseReturnValue:
    return _retried_form(Kind.EVENT, event_id)


@bp.post("/admin/mails/<mail_id>/retry")
@ratelimit.writes
@admin_required
def retry_mail_form(mail_id: str) -> ResponseReturnValue:
    return _retried_form(Kind.MAIL, mail_id)


@bp.post("/admin/deliveries/<delivery_id>/retry")
@ratelimit.writes
@admin_required
def retry_delivery_form(delivery_id: str) -> ResponseReturnValue:
    return _retried_form(Kind.DELIVERY, delivery_id)
