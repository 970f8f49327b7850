"""Preferences: the page (works without JavaScript) and its JSON API (§5.2).

No route-level permissions: every signed-in account manages its own preferences, and
every statement names the caller's id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_babel import gettext
from flask_wtf import FlaskForm

from .. import preferences
from ..categories import Category
from ..config import mail_configured
from ..instance_settings import site_enabled
from ..login import login_required
from ..schemas import PreferencesSchema, dump, load, preferences_update_schema
from ..state import state
from .core import (
    api_login_required,
    bp,
    changed_mine,
    current_site_id,
    json_body,
    session,
    user_id,
)

preferences_schema = PreferencesSchema()

# The page's form is Flask-WTF's own, for its CSRF token only: the checkboxes are named
# ``<key>.<channel>`` and read as a map, then validated by the same schema as the API.


def _visible_categories() -> list[Category]:
    st = state()
    viewer = st.host.user(user_id())
    if viewer is None:
        return []
    return st.registry.visible_to(viewer, st.host.is_admin(viewer.id))


def _overview(categories: Sequence[Category]) -> preferences.Overview:
    return preferences.overview(
        session(),
        categories,
        user_id(),
        mail_on=mail_configured(),
        site_on=site_enabled(session(), current_site_id()),
    )


def _save(categories: Sequence[Category], wanted: Mapping[str, Mapping[str, bool]]) -> None:
    """Store, audit what changed, commit: one path for the API and the form."""
    changed = preferences.save(
        session(), user_id(), categories, wanted, mail_on=mail_configured()
    )
    _audit(changed)
    changed_mine()  # a category turned off in the inbox changes what the badge counts


def _audit(changed: list[str]) -> None:
    if changed:
        state().host.audit(
            "updateNotificationPrefs",
            actor_id=user_id(),
            kind="profile",
            details={"categories": changed},
        )


@bp.get("/api/preferences")
@api_login_required
def get_preferences() -> ResponseReturnValue:
    return dump(preferences_schema, _overview(_visible_categories()).as_json())


@bp.put("/api/preferences")
@api_login_required
def put_preferences() -> ResponseReturnValue:
    categories = _visible_categories()
    schema = preferences_update_schema(tuple(c.key for c in categories))
    body = load(schema, json_body())
    _save(categories, body["categories"])
    return dump(preferences_schema, _overview(categories).as_json())


@bp.get("/preferences")
@login_required
def preferences_page() -> ResponseReturnValue:
    categories = _visible_categories()
    return render_template(
        "wikinotify/preferences.html",
        overview=_overview(categories),
        form=FlaskForm(),
    )


@bp.post("/preferences")
@login_required
def preferences_form() -> ResponseReturnValue:
    """The same save as the API, for a browser without JavaScript."""
    form = FlaskForm()
    if not form.validate_on_submit():
        return render_template(
            "wikinotify/preferences.html",
            overview=_overview(_visible_categories()),
            form=form,
            error=gettext("Your session has expired. Reload the page and try again."),
        ), 400
    categories = _visible_categories()
    if request.form.get("action") == "stop_all_email":
        _audit(preferences.stop_all_email(session(), user_id(), categories))
        changed_mine()
        flash(gettext("Email notifications are off for every category."))
    else:
        wanted = {
            c.key: {
                channel: f"{c.key}.{channel}" in request.form for channel in ("inApp", "email")
            }
            for c in categories
        }
        _save(categories, wanted)
        flash(gettext("Your notification preferences are saved."))
    return redirect(url_for(".preferences_page"))
