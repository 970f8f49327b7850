"""Preferences: the page (works without JavaScript) and its JSON API
(docs/rules.md#the-preferences-page).

No route-level permissions: every signed-in account manages its own preferences, and
every statement names the caller's id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from babel.dates import get_day_names
from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_babel import get_locale, gettext
from flask_wtf import FlaskForm
from marshmallow import ValidationError

from .. import preferences
from ..categories import Category
from ..i18n import SOURCE_LANGUAGE
from ..inbox import live
from ..instance_settings import instance_settings, site_enabled
from ..login import caller_id, login_required
from ..mail.setup import mail_configured
from ..models import utcnow
from ..openapi import WRITE_ERRORS, operation, per_category
from ..outbound import endpoints, push_subscriptions
from ..preferences.cadence import Schedule, known_timezones
from ..refusals import Refusal, refusals
from ..schemas import (
    EmailScheduleSchema,
    PreferencesSchema,
    dump,
    load,
    preferences_update_schema,
)
from ..state import state
from .core import (
    api_login_required,
    bp,
    changed_mine,
    current_site_id,
    form_integer,
    json_body,
    session,
)
from .feed_routes import feed_url

preferences_schema = PreferencesSchema()

# The page's form is Flask-WTF's own, for its CSRF token only: the checkboxes are named
# ``<key>.<channel>`` and read as a map, then validated by the same schema as the API.


def visible_categories() -> list[Category]:
    """The categories the reader sees: her preferences, and the inbox's filter bar."""
    st = state()
    viewer = st.host.user(caller_id(required=True))
    if viewer is None:
        return []
    return st.registry.visible_to(viewer, st.host.is_admin(viewer.id))


def _site_timezone() -> str | None:
    site = state().host.site(current_site_id())
    return site.timezone if site is not None else None


def _overview(categories: Sequence[Category]) -> preferences.Overview:
    return preferences.overview(
        session(),
        categories,
        caller_id(required=True),
        mail_on=mail_configured(),
        site_on=site_enabled(session(), current_site_id()),
        user=state().host.user(caller_id(required=True)),
        site_timezone=_site_timezone(),
        outbound=endpoints.channels_set_up(session(), caller_id(required=True)),
    )


def _save_schedule(wanted: Mapping[str, Any]) -> None:
    """Store the caller's email schedule (``wanted`` as :class:`EmailScheduleSchema` loads
    it) and move their pending mail to it (docs/rules.md#digests); audited like the categories."""
    st = state()
    user = st.host.user(caller_id(required=True))
    if user is None:
        return
    current = preferences.email_schedule(session(), user.id)
    schedule = Schedule(
        cadence=wanted["cadence"],
        hour=wanted.get("hour", current.hour),
        weekday=wanted.get("weekday", current.weekday),
        timezone=wanted.get("timezone", current.timezone),
    )
    if not preferences.save_schedule(session(), user.id, schedule):
        return
    # Her chosen zone is the one her pages say times in (docs/rules.md#whose-time): a page
    # of her inbox kept in another goes (docs/rules.md#kept-pages).
    live.changed_at_commit(session(), [user.id])
    preferences.reschedule_pending(
        session(), user, st.registry.values(), schedule, instance_settings(session()),
        now=utcnow(),
        site_timezone=_site_timezone(),
    )
    st.host.audit(
        "updateNotificationPrefs",
        actor_id=user.id,
        kind="profile",
        details={"emailSchedule": schedule.cadence},
    )


def _save(categories: Sequence[Category], wanted: Mapping[str, Mapping[str, bool]]) -> None:
    """Store, audit what changed, commit: one path for the API and the form."""
    changed = preferences.save(
        session(), caller_id(required=True), categories, wanted, mail_on=mail_configured()
    )
    _audit(changed)
    changed_mine()  # a category turned off in the inbox changes what the badge counts


def _audit(changed: list[str]) -> None:
    if changed:
        state().host.audit(
            "updateNotificationPrefs",
            actor_id=caller_id(),
            kind="profile",
            details={"categories": changed},
        )


@bp.get("/api/preferences")
@operation(
    summary="The caller's preferences",
    description="Every category the caller may see, with its channels and "
    "defaults, and the email schedule. `channels` lists the grid's columns: `inApp`, "
    "`email`, then `webhook`, `chat` and `push` where the caller has an endpoint of that "
    "kind (a webhook waiting for verification counts; for push, a browser subscribed "
    "through `POST /api/push/subscriptions`); each category has a key per column.",
    ok={200: ("The preferences.", PreferencesSchema)},
    errors=(401,),
)
@api_login_required
def get_preferences() -> ResponseReturnValue:
    return dump(preferences_schema, _overview(visible_categories()))


@bp.put("/api/preferences")
@operation(
    summary="Replace the caller's preferences",
    description="The full map: every category, with `inApp` and `email`, and "
    "`webhook`, `chat` or `push` where the caller set one up (left out, they stay as they "
    "are); "
    "and, optionally, "
    "`emailSchedule` (left out, the schedule stays as it is). Its `hour` and `weekday` "
    "are JSON integers written without a fraction (`9.0` is refused), its `timezone` "
    "an IANA name (`Europe/Paris`) or null for the account's. A refused body stores "
    "nothing; the 400 names the field.",
    body=per_category(preferences_update_schema),
    ok={200: ("The preferences as stored.", PreferencesSchema)},
    errors=WRITE_ERRORS,
)
@api_login_required
def put_preferences() -> ResponseReturnValue:
    categories = visible_categories()
    schema = preferences_update_schema(tuple(c.key for c in categories))
    body = load(schema, json_body())
    if body["email_schedule"] is not None:
        _save_schedule(body["email_schedule"])
    _save(categories, body["categories"])
    return dump(preferences_schema, _overview(categories))


def _page(form: FlaskForm, *, error: str | None = None, refused: list[Refusal] | None = None,
          code: int = 200) -> ResponseReturnValue:
    """The page, with the choices the schedule's selectors offer; after a refused schedule,
    each field's sentence (``refused``)."""
    # Babel names the days in the page's language: no catalogue entry for each.
    days = get_day_names("wide", locale=str(get_locale() or SOURCE_LANGUAGE))
    return render_template(
        "wikinotify/preferences.html",
        overview=_overview(visible_categories()),
        form=form,
        error=error,
        refused=refused or [],
        weekdays=[(number, days[number]) for number in range(7)],
        timezones=sorted(known_timezones()),
        feed_url=feed_url(),
        push_subscriptions=push_subscriptions.list_for(session(), caller_id(required=True)),
    ), code


@bp.get("/preferences")
@login_required
def preferences_page() -> ResponseReturnValue:
    return _page(FlaskForm())


@bp.post("/preferences/schedule")
@login_required
def preferences_schedule_form() -> ResponseReturnValue:
    """The page's "Email delivery" selectors, for a browser without JavaScript: the API's
    validation and save, then Post/Redirect/Get."""
    form = FlaskForm()
    if not form.validate_on_submit():
        return _page(form, code=400,
                     error=gettext("Your session has expired. Reload the page and try again."))
    wanted: dict[str, Any] = {"cadence": request.form.get("cadence", "")}
    for name in ("hour", "weekday"):
        wanted[name] = form_integer(request.form.get(name, ""))
    wanted["timezone"] = request.form.get("timezone") or None
    try:
        schedule = load(EmailScheduleSchema(), wanted)
    except ValidationError as invalid:
        return _page(form, code=400, refused=refusals(invalid))
    _save_schedule(schedule)
    session().commit()
    flash(gettext("Your email delivery is saved."))
    return redirect(url_for(".preferences_page"))


@bp.post("/preferences")
@login_required
def preferences_form() -> ResponseReturnValue:
    """The same save as the API, for a browser without JavaScript."""
    form = FlaskForm()
    if not form.validate_on_submit():
        return _page(form, code=400,
                     error=gettext("Your session has expired. Reload the page and try again."))
    categories = visible_categories()
    if request.form.get("action") == "stop_all_email":
        _audit(preferences.stop_all_email(session(), caller_id(required=True), categories))
        changed_mine()
        flash(gettext("Email notifications are off for every category."))
    else:
        # The columns the page showed: an unchecked box is not sent, so each is read.
        shown = _overview(categories).channels
        wanted = {
            c.key: {channel: f"{c.key}.{channel}" in request.form for channel in shown}
            for c in categories
        }
        _save(categories, wanted)
        flash(gettext("Your notification preferences are saved."))
    return redirect(url_for(".preferences_page"))
