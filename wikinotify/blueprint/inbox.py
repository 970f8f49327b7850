"""The inbox: its JSON API (§9.1) and its page (§9.2).

No route-level permissions: every signed-in account reads and tidies its own inbox, and
every statement names the caller's id. Someone else's entry id answers exactly as an id
that does not exist. Reading and dismissing are not audited (§9.1).
"""

from __future__ import annotations

import hashlib
from itertools import groupby

from flask import abort, flash, jsonify, redirect, render_template, request, url_for
from flask_babel import gettext, ngettext
from flask_login import login_required
from flask_wtf import FlaskForm

from .. import inbox
from ..presentation import present
from ..schemas import (
    ListQuerySchema,
    MarkedSchema,
    MarkReadSchema,
    NotificationPageSchema,
    SummarySchema,
    load,
)
from ..settings import site_enabled
from ..state import state
from .core import (
    api_login_required,
    bp,
    current_site_id,
    json_body,
    json_error,
    session,
    user_id,
)

list_query_schema = ListQuerySchema()
mark_read_schema = MarkReadSchema()
marked_schema = MarkedSchema()
page_schema = NotificationPageSchema()
summary_schema = SummarySchema()


class InboxForm(FlaskForm):
    """The CSRF token of the inbox's buttons."""


def _entry_id(raw: str) -> int:
    """A path id; anything that is not one (letters, ``1_000``, a number past what the
    column holds) is answered like an id that does not exist."""
    entry_id = inbox.parse_id(raw)
    if entry_id is None:
        abort(404)
    return entry_id


def _not_found():
    return json_error(404, "not_found", "No such notification.")


def _page_of_entries(query):
    try:
        page = inbox.list_entries(
            session(),
            user_id(),
            current_site_id(),
            cursor=query["cursor"],
            unread_only=query["unread"],
        )
    except inbox.BadCursor:
        return None, None
    st = state()
    viewer = st.host.user(user_id())
    return present(st.host, st.registry, page.entries, viewer), page.next_cursor


def unread_label(unread: int) -> str:
    return "99+" if unread > 99 else str(unread)


def badge() -> dict:
    """The header badge's first paint (``{% include "wikinotify/badge.html" %}``); the
    script keeps it current from the summary endpoint."""
    me = user_id()
    site_id = current_site_id()
    if me is None or not site_enabled(session(), site_id):
        return {"show": False, "unread": 0, "label": ""}
    unread = inbox.unread_count(session(), me, site_id)  # every page the wiki draws: one query
    return {"show": True, "unread": unread, "label": unread_label(unread)}


@bp.record_once
def _register_badge(setup_state) -> None:
    setup_state.app.jinja_env.globals["wikinotify_badge"] = badge


# -- API ----------------------------------------------------------------------------------


@bp.get("/api/notifications")
@api_login_required
def api_list():
    query = load(list_query_schema, request.args.to_dict())
    entries, next_cursor = _page_of_entries(query)
    if entries is None:
        return json_error(400, "invalid", "cursor: Not a cursor this API gave out.",
                          fields={"cursor": ["Not a cursor this API gave out."]})
    return page_schema.dump(
        {"items": [e.as_json() for e in entries], "nextCursor": next_cursor}
    )


@bp.get("/api/notifications/summary")
@api_login_required
def api_summary():
    """The badge: cheap, cacheable, and a 304 when nothing changed (§9.1)."""
    site_id = current_site_id()
    enabled = site_enabled(session(), site_id)
    unread, latest_at = inbox.summary(session(), user_id(), site_id) if enabled else (0, None)
    body = summary_schema.dump(
        {"unread": unread, "unreadLabel": unread_label(unread), "latestAt": latest_at,
         "enabled": enabled}
    )
    response = jsonify(body)
    # The user is part of the tag: two accounts on one browser never share a 304.
    tag = f"{user_id()}:{site_id}:{unread}:{body['latestAt']}:{enabled}"
    response.set_etag(hashlib.sha256(tag.encode()).hexdigest()[:32])
    response.headers["Cache-Control"] = "private, no-cache"
    return response.make_conditional(request)


@bp.put("/api/notifications/<entry_id>/read")
@api_login_required
def api_mark_read(entry_id: str):
    if not inbox.mark_read(session(), user_id(), _entry_id(entry_id)):
        return _not_found()
    session().commit()
    return "", 204


@bp.put("/api/notifications/read")
@api_login_required
def api_mark_all_read():
    body = load(mark_read_schema, json_body(optional=True))
    count = inbox.mark_all_read(session(), user_id(), current_site_id(), page_id=body["pageId"])
    session().commit()
    return marked_schema.dump({"marked": count})


@bp.delete("/api/notifications/<entry_id>")
@api_login_required
def api_dismiss(entry_id: str):
    if not inbox.dismiss(session(), user_id(), _entry_id(entry_id)):
        return _not_found()
    session().commit()
    return "", 204


# -- the page (works without JavaScript) -------------------------------------------------


@bp.get("/inbox")
@login_required
def inbox_page():
    query = load(list_query_schema, request.args.to_dict())
    entries, next_cursor = _page_of_entries(query)
    if entries is None:
        abort(400)
    days = [(day, list(group)) for day, group in groupby(entries, key=lambda e: e.day.date())]
    return render_template(
        "wikinotify/inbox.html",
        days=days,
        next_cursor=next_cursor,
        unread_only=query["unread"],
        form=InboxForm(),
    )


def _back_to_inbox():
    """Back where the button was (the same page of the inbox), never off-site."""
    home = url_for(".inbox_page")
    wanted = request.form.get("next") or home
    return redirect(wanted if wanted.startswith(home + "?") or wanted == home else home)


def _checked_form() -> None:
    if not InboxForm().validate_on_submit():
        abort(400, gettext("Your session has expired. Reload the page and try again."))


@bp.post("/inbox/<entry_id>/read")
@login_required
def inbox_mark_read(entry_id: str):
    _checked_form()
    if not inbox.mark_read(session(), user_id(), _entry_id(entry_id)):
        abort(404)
    session().commit()
    return _back_to_inbox()


@bp.post("/inbox/<entry_id>/dismiss")
@login_required
def inbox_dismiss(entry_id: str):
    _checked_form()
    if not inbox.dismiss(session(), user_id(), _entry_id(entry_id)):
        abort(404)
    session().commit()
    return _back_to_inbox()


@bp.post("/inbox/read-all")
@login_required
def inbox_mark_all_read():
    _checked_form()
    count = inbox.mark_all_read(session(), user_id(), current_site_id())
    session().commit()
    flash(ngettext("%(num)d notification marked as read.",
                   "%(num)d notifications marked as read.", count))
    return _back_to_inbox()
