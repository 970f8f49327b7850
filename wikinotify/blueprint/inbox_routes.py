"""The inbox: its JSON API (docs/rules.md#the-inbox-api) and its page
(docs/rules.md#the-inbox-page).

No route-level permissions: every signed-in account reads and tidies its own inbox, and
every statement names the caller's id. Someone else's entry id answers exactly as an id
that does not exist. Reading and dismissing are not audited (docs/rules.md#the-inbox-api).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from itertools import groupby
from typing import Any, cast

from flask import (
    abort,
    current_app,
    flash,
    render_template,
    request,
    url_for,
)
from flask.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue
from flask_babel import gettext, ngettext
from flask_wtf import FlaskForm
from marshmallow import ValidationError
from werkzeug.wrappers import Response

from .. import catalogue, inbox, refusals
from ..announcements import withdrawn_entries
from ..inbox import live, undo
from ..inbox.presentation import Presented, answered, by_page, present
from ..instance_settings import site_enabled
from ..login import caller_facts, caller_id, login_required, session_user_id
from ..openapi import CURSOR, WRITE_ERRORS, operation, path_id
from ..schemas import (
    DismissedSchema,
    MarkedSchema,
    MarkReadSchema,
    NotificationPageSchema,
    SummarySchema,
    UndoneSchema,
    UndoSchema,
    count_label,
    dump,
    list_query_schema,
    load,
)
from ..state import state
from ..wiki_said import Said
from . import kept_pages, unchanged_polls
from .core import (
    api_login_required,
    badge_state,
    bp,
    changed_mine,
    current_site_id,
    json_body,
    json_error,
    redirect_back,
    session,
    summary_body,
    summary_etag,
    summary_json,
)
from .feed_routes import existing_feed_url
from .preferences_routes import visible_categories
from .reader_time import local_day, shown_in, zone_and_locale

#: The path's entry id, as the document describes it.
ENTRY_ID = path_id("entry_id", "An inbox entry's id. Any other caller's id, or anything "
                   "that is not an id, answers 404 exactly as a missing one.")

mark_read_schema = MarkReadSchema()
marked_schema = MarkedSchema()
page_schema = NotificationPageSchema()
dismissed_schema = DismissedSchema()
undo_schema = UndoSchema()
undone_schema = UndoneSchema()


def _entry_id(raw: str) -> int:
    """A path id; anything that is not one (letters, ``1_000``, a number past what the
    column holds) is answered like an id that does not exist."""
    entry_id = inbox.parse_id(raw)
    if entry_id is None:
        abort(404)
    return entry_id


#: Why an unread entry cannot be made unread again (the API's 409).
NEWER_UNREAD = "A newer unread entry about the same thing exists; this one stays read."
#: Every refused undo token, whatever the reason: expired, another account's, or forged.
BAD_UNDO_TOKEN = "Not an undo token given to you, or more than five minutes old."


def _undo_secret() -> str | bytes:
    """Undo tokens are signed with the app's session key: they end with the sessions."""
    return cast(str | bytes, current_app.secret_key)


def _not_found() -> tuple[Response, int]:
    return json_error(404, "not_found", "No such notification.")


def _absent_where_switched_off(said: Said | None = None) -> None:
    """A site whose notifications are switched off has no inbox (docs/rules.md#the-site-switch): its
    page and its list answer as a route that does not exist would. Nothing is deleted; the entries
    are back when the site is switched on. ``said``: the switch as read at the versions the
    list's kept page is looked for at (:mod:`wikinotify.wiki_said`)."""
    site_id = current_site_id()
    if said is None:
        enabled = site_enabled(session(), site_id)
    else:
        enabled = said.site_enabled(site_id, lambda: site_enabled(session(), site_id))
    if not enabled:
        abort(404)


def _list_query(args: Mapping[str, str]) -> dict[str, Any]:
    """The list's query, the category checked against the registry (a 400 naming it)."""
    # An empty value is no filter: the page's form sends ``category=`` for "All".
    asked = {key: value for key, value in args.items() if value != ""}
    return load(list_query_schema(tuple(state().registry)), asked)


def _filters(query: Mapping[str, Any]) -> inbox.Filters:
    return inbox.Filters(query["category"], query["page_id"], query["unread"])


def _page_of_entries(
    query: Mapping[str, Any], said: Said | None = None,
) -> tuple[list[Presented], str | None] | tuple[None, None]:
    """A page of the list, presented; ``said``: what the wiki said at the versions read
    before anything else (:mod:`.kept_pages`, :mod:`wikinotify.wiki_said`)."""
    st = state()
    me, site_id, filters = caller_id(required=True), current_site_id(), _filters(query)
    # Unread announcements first (docs/rules.md#announcements), and in no later page.
    try:
        pinned, page = inbox.list_with_pinned(
            session(), me, site_id, [c.key for c in st.registry.values() if c.pinned],
            cursor=query["cursor"], filters=filters)
    except inbox.BadCursor:
        return None, None
    first = [] if query["cursor"] else pinned
    # A withdrawn announcement's entry a running fan-out wrote after the withdrawal.
    gone = withdrawn_entries(session(), [*first, *page.entries])
    first = [e for e in first if e.id not in gone]
    rows = [e for e in page.entries if e.id not in gone]
    host = st.host if said is None else said.host(st.host)
    shown = present(host, st.registry, [*first, *rows], caller_facts())
    return ([dataclasses.replace(p, pinned=True) for p in shown[:len(first)]]
            + shown[len(first):]), page.next_cursor


def badge() -> dict[str, Any]:
    """The header badge's first paint (``{% include "wikinotify/badge.html" %}``); the
    script keeps it current from the stream, or the summary endpoint."""
    me = caller_id()
    if me is None:
        return {"show": False, "unseen": 0, "label": ""}
    enabled, unseen = badge_state(me)
    if not enabled:
        return {"show": False, "unseen": 0, "label": ""}
    return {"show": True, "unseen": unseen, "label": count_label(unseen)}


@bp.record_once
def _register_badge(setup_state: BlueprintSetupState) -> None:
    setup_state.app.jinja_env.globals["wikinotify_badge"] = badge


@bp.record_once
def _answer_unchanged_polls_first(setup_state: BlueprintSetupState) -> None:
    unchanged_polls.wrap(setup_state.app, f"{setup_state.name}.{api_summary.__name__}",
                         f"{setup_state.name}.{api_list.__name__}")


# -- API ----------------------------------------------------------------------------------


@bp.get("/api/notifications")
@operation(
    summary="One page of the caller's inbox, newest activity first",
    description="Thirty entries per page, keyset-paginated: pass `nextCursor` back "
    "as `cursor` for the next page, with the same filters (a cursor is for the list it "
    "came from; with other filters it is a 400); `nextCursor` is null on the last page. "
    "Entries of the current site and instance-wide ones. The filters combine.",
    parameters=[
        CURSOR,
        {"in": "query", "name": "category", "required": False,
         "description": "Only entries of this category (a category key; an unknown one "
         "is a 400).", "schema": {"type": "string"}},
        {"in": "query", "name": "pageId", "required": False,
         "description": "Only entries about this page (a page id; a page with none of "
         "the caller's entries gives an empty list).",
         "schema": {"type": "string", "maxLength": 64}},
        {"in": "query", "name": "unread", "required": False,
         "description": "Only unread entries.", "schema": {"type": "boolean"}},
    ],
    ok={200: ("A page of entries.", NotificationPageSchema)},
    errors=(400, 401, 404),
    error_text={404: "Notifications are switched off on the current site: the "
                "inbox answers as a route that does not exist (`not_found`)."},
)
def api_list() -> ResponseReturnValue:
    """The page kept for this very request while nothing changed (before the account is
    loaded: :mod:`.kept_pages`), else the page read afresh."""
    look = kept_pages.look()
    if look.kept is None:
        return _list(look)
    kept = look.kept
    unchanged_polls.answered_from_redis(kept.user_id, kept.site_id, page=kept.shape)
    return kept.response


@api_login_required
def _list(look: kept_pages.Look) -> ResponseReturnValue:
    shared = look.shared_version
    said = None if shared is None else state().wiki_said.at(shared)
    _absent_where_switched_off(said)
    query = _list_query(request.args.to_dict())
    me = caller_id(required=True)
    # Kept at the version read before the account loaded, for the session's own account
    # (not an API token's).
    keeping = look.user_id == me
    with catalogue.held():  # thirty sentences and sixty times in the caller's language
        entries, next_cursor = _page_of_entries(query, said)
        if entries is None:
            return json_error(400, "invalid", "cursor: Not a cursor this API gave out for "
                              "this list.", fields={"cursor": ["Not a cursor this API gave "
                                                               "out for this list."]})
        zone, locale = zone_and_locale()
        items = answered(state().host, entries,
                         shown_in([p.entry.updated_at for p in entries], zone, locale))
        page = dump(page_schema, {"items": items, "next_cursor": next_cursor})
    kept = kept_pages.keep(look, page, zone, locale) if keeping else None
    return page if kept is None else kept


@bp.get("/api/notifications/summary")
@operation(
    summary="The unread badge",
    description="Counted from at most 100 entries (`unreadLabel` says `99+` past "
    "99). `unseen` counts the unread entries created or updated since the caller last "
    "opened the bell menu or the inbox (the badge's number). Send the last `ETag` as "
    "`If-None-Match`: an unchanged badge is a 304. `GET /stream` (Server-Sent "
    "Events, outside this API) pushes the same body on every change.",
    parameters=[
        {"in": "header", "name": "If-None-Match", "required": False,
         "schema": {"type": "string"}},
    ],
    ok={
        200: ("The badge.", SummarySchema),
        304: ("Unchanged since the `ETag` sent in `If-None-Match`.", None),
    },
    headers={200: ("ETag", "Cache-Control"), 304: ("ETag",)},
    errors=(401,),
)
def api_summary() -> ResponseReturnValue:
    """The badge: cheap, cacheable, and a 304 when nothing changed (docs/rules.md#the-inbox-api).

    The ETag is the user's summary version in Redis (forgotten by every write that changes
    the summary and made afresh by the next read, see :mod:`wikinotify.inbox.live`), and
    the body read at that version is kept beside it, so a poll while nothing changed, a
    304 or a 200, is one Redis ``MGET`` and no SQL: not even the wiki's, whose account is
    not loaded for it (see :func:`_unchanged`). Without Redis the tag is the body's own,
    read from the database. An answer from Redis (a 304, or the kept body) for the
    session's own account may be given again to the very same request before Flask
    dispatches it (:mod:`wikinotify.blueprint.unchanged_polls`)."""
    unchanged = _unchanged()
    if unchanged is not None:
        return unchanged
    me = caller_id()
    if me is None:
        refused = session_user_id()
        if refused is not None:  # a deactivated or deleted account: its 304s end now
            live.forget_account(current_app, refused)
        return json_error(401, "unauthorized", "Sign in to use this API.")
    site_id = current_site_id()
    # Before the body (see its docstring); the account was just loaded, so the next
    # polls may skip loading it.
    version = live.summary_version(current_app, me, account_loaded=True)
    tag = summary_etag(me, site_id, version) if version else None
    if tag and request.if_none_match.contains(tag):
        if session_user_id() == me:  # the session's account, not one a token named
            unchanged_polls.answered_from_redis(me, site_id)
        return _summary_response(current_app.response_class(status=304), tag)
    data = summary_json(me, site_id, version)
    return _summary_response(_json(data), tag or summary_etag(me, site_id, data.decode()))


def _unchanged() -> Response | None:
    """A poll's answer from the signed session and one Redis read, before anything loads
    the account (Flask-Login's user loader runs the wiki's SQL) or reads the database: a
    304 when the caller holds the current tag, else the body kept at the current version;
    ``None`` sends the request down the full path, which does both. The account id is
    the one Flask-Login signed into the session, trusted only while the full path has
    loaded that account in the last few minutes
    (:data:`wikinotify.inbox.live.ACCOUNT_RECHECK_SECONDS`); the tag names the user, so
    no other account's tag matches, and the body is the one kept for this account."""
    me = session_user_id()
    if me is None:
        return None
    site_id = current_site_id()
    trusted = live.trusted_summary(current_app, me, site_id)
    if trusted is None:
        return None
    version, body = trusted
    tag = summary_etag(me, site_id, version)
    answer: Response
    if request.if_none_match.contains(tag):
        answer = current_app.response_class(status=304)
    elif body is not None:
        answer = _json(body)
    else:
        return None
    unchanged_polls.answered_from_redis(me, site_id)
    return _summary_response(answer, tag)


def _json(data: bytes) -> Response:
    return current_app.response_class(data, mimetype="application/json")


def _summary_response(response: Response, tag: str) -> Response:
    response.set_etag(tag)
    response.headers["Cache-Control"] = "private, no-cache"
    return response.make_conditional(request)


@bp.put("/api/notifications/<entry_id>/read")
@operation(
    summary="Mark one entry read",
    description="Reading an entry also cancels its pending email.",
    parameters=[ENTRY_ID],
    ok={204: ("Marked read (or it already was).", None)},
    errors=(*WRITE_ERRORS, 404),
)
@api_login_required
def api_mark_read(entry_id: str) -> ResponseReturnValue:
    if not inbox.mark_read(session(), caller_id(required=True), _entry_id(entry_id)):
        return _not_found()
    changed_mine()
    return "", 204


@bp.put("/api/notifications/read")
@operation(
    summary="Mark every entry read, or one page's",
    description="No body, or `{}`, marks every unread entry of the current site "
    "read; `{\"pageId\": ...}` only that page's. Any other body is a 400 and marks "
    "nothing. `undoToken`, sent to `POST /api/notifications/undo` within five "
    "minutes, makes them unread again.",
    body=MarkReadSchema,
    body_required=False,
    ok={200: ("How many entries were marked, and the token that undoes it.", MarkedSchema)},
    errors=WRITE_ERRORS,
)
@api_login_required
def api_mark_all_read() -> ResponseReturnValue:
    body = load(mark_read_schema, json_body(optional=True))
    count, token = undo.mark_all_read_undoably(
        session(), _undo_secret(), caller_id(required=True), current_site_id(),
        page_id=body["page_id"],
    )
    changed_mine()
    return dump(marked_schema, {"marked": count, "undo_token": token})


@bp.delete("/api/notifications/<entry_id>")
@operation(
    summary="Dismiss one entry",
    description="`undoToken`, sent to `POST /api/notifications/undo` within five "
    "minutes, puts the entry back as it was.",
    parameters=[ENTRY_ID],
    ok={200: ("Dismissed; the token that undoes it.", DismissedSchema)},
    errors=(*WRITE_ERRORS, 404),
)
@api_login_required
def api_dismiss(entry_id: str) -> ResponseReturnValue:
    token = undo.dismiss(session(), _undo_secret(), caller_id(required=True),
                         _entry_id(entry_id))
    if token is None:
        return _not_found()
    changed_mine()
    return dump(dismissed_schema, {"undo_token": token})


@bp.put("/api/notifications/<entry_id>/unread")
@operation(
    summary="Mark one entry unread again",
    description="The mail that reading it cancelled stays cancelled. One entry per "
    "thing is unread at a time: when a newer unread entry about the same thing "
    "exists, this one stays read and the answer is a 409 (`newer_unread`); later "
    "events join the unread one.",
    parameters=[ENTRY_ID],
    ok={204: ("Unread (or it already was).", None)},
    errors=(*WRITE_ERRORS, 404, 409),
    error_text={409: "A newer unread entry about the same thing exists "
                "(`newer_unread`): this one stays read."},
)
@api_login_required
def api_mark_unread(entry_id: str) -> ResponseReturnValue:
    try:
        found = inbox.mark_unread(session(), caller_id(required=True), _entry_id(entry_id))
    except inbox.TwinUnread:
        session().rollback()
        return json_error(409, "newer_unread", NEWER_UNREAD)
    if not found:
        return _not_found()
    changed_mine()
    return "", 204


@bp.post("/api/notifications/undo")
@operation(
    summary="Undo a dismissal or a \"mark all read\"",
    description="Puts the entries back as they were: read state, mail state, and for "
    "a dismissal the entry itself. The token works for five minutes, for the account "
    "it was given to. Idempotent: an undo done already restores nothing more. An "
    "entry whose newer twin became unread meanwhile comes back read.",
    body=UndoSchema,
    ok={200: ("How many entries came back.", UndoneSchema)},
    errors=WRITE_ERRORS,
    error_text={400: "The request is refused; `error.code` says why (`invalid` names "
                "the fields in `error.fields`: a token that is not one this API gave "
                "the caller, or is over five minutes old, is refused on `token`)."},
)
@api_login_required
def api_undo() -> ResponseReturnValue:
    body = load(undo_schema, json_body())
    try:
        undone = undo.undo(session(), _undo_secret(), caller_id(required=True), body["token"])
    except undo.BadToken:
        return json_error(400, "invalid", f"token: {BAD_UNDO_TOKEN}",
                          fields={"token": [BAD_UNDO_TOKEN]})
    changed_mine()
    return dump(undone_schema, {"restored": undone.restored})


@bp.put("/api/notifications/seen")
@operation(
    summary="Mark the inbox seen",
    description="Stamps the caller's seen time (the bell menu was opened): "
    "`unseen` in the summary counts from it. No body, or a JSON one (ignored).",
    body_required=False,
    ok={204: ("Seen.", None)},
    errors=WRITE_ERRORS,
)
@api_login_required
def api_seen() -> ResponseReturnValue:
    """The bell menu was opened: the badge's number starts again from here."""
    json_body(optional=True)  # nothing to read, but a body that is not JSON is refused
    inbox.mark_seen(session(), caller_id(required=True))
    changed_mine()
    return "", 204


# -- the page (works without JavaScript) -------------------------------------------------


#: ``?view=`` of the inbox page that groups it by page (docs/rules.md#the-inbox-page).
PAGES_VIEW = "pages"


def _render_inbox(template: str, **context: Any) -> str:
    _absent_where_switched_off()
    # ``view`` is the page's alone (by day, or by page): the API's list has no such thing.
    by_pages = request.args.get("view") == PAGES_VIEW
    # The page's query names the page ``page`` (an address a reader may read); the API's
    # ``pageId``. A refused filter on the page is a 400, as a refused cursor is.
    asked = {k: v for k, v in request.args.to_dict().items() if k != "view"}
    if "page" in asked:
        asked["pageId"] = asked.pop("page")
    try:
        query = _list_query(asked)
    except ValidationError as invalid:
        abort(400, refusals.said(invalid))
    listed, next_cursor = _page_of_entries(query)
    if listed is None:
        abort(400)
    pinned = [p for p in listed if p.pinned]
    entries = [p for p in listed if not p.pinned]
    days: list[tuple[Any, list[Presented]]] = (
        list(by_page(entries)) if by_pages else
        [(day, list(group)) for day, group in groupby(entries, key=lambda e: local_day(e.day))])
    # A dict of Any: mypy would match the query's strings against url_for's own keywords.
    args: dict[str, Any] = request.args.to_dict()
    return render_template(
        template,
        days=days,
        pinned=pinned,
        next_cursor=next_cursor,
        unread_only=query["unread"],
        filters=_filters(query),
        filter_category=state().registry[query["category"]] if query["category"] else None,
        # The filters as the page's address carries them (docs/rules.md#the-inbox-page):
        # every link of the page keeps them; ``None`` drops a key from url_for's query.
        filter_args={"category": query["category"], "page": query["page_id"],
                     "unread": 1 if query["unread"] else None,
                     "view": PAGES_VIEW if by_pages else None},
        categories=visible_categories(),
        by_page=by_pages,
        view=PAGES_VIEW if by_pages else None,
        # Where the buttons come back to: this page of the inbox (also from a fragment).
        here=url_for(".inbox_page", **args),
        form=FlaskForm(),  # the CSRF token of the inbox's buttons
        **context,
    )


@bp.get("/inbox")
@login_required
def inbox_page() -> str:
    """The inbox; opening it is seeing what is in it (the badge's number clears), with or
    without JavaScript."""
    _absent_where_switched_off()  # before marking anything seen
    inbox.mark_seen(session(), caller_id(required=True))
    changed_mine()
    # Read before the list: the page's script reloads the list when a summary differs
    # from this one, so an entry written between the two reads is never missed.
    drawn_with = summary_body(caller_id(required=True), current_site_id(), enabled=True)
    return _render_inbox("wikinotify/inbox.html", drawn_with=drawn_with,
                         feed_url=existing_feed_url())


@bp.get("/inbox/entries")
@login_required
def inbox_entries() -> str:
    """The inbox's list alone, for the open page to show new entries without a reload."""
    return _render_inbox("wikinotify/_entries.html")


def _back_to_inbox() -> Response:
    """Back where the button was (the same page of the inbox), never off-site."""
    home = url_for(".inbox_page")
    return redirect_back(home, within=home)


def _checked_form() -> None:
    if not FlaskForm().validate_on_submit():
        abort(400, gettext("Your session has expired. Reload the page and try again."))


@bp.post("/inbox/<entry_id>/read")
@login_required
def inbox_mark_read(entry_id: str) -> Response:
    _checked_form()
    if not inbox.mark_read(session(), caller_id(required=True), _entry_id(entry_id)):
        abort(404)
    changed_mine()
    return _back_to_inbox()


@bp.post("/inbox/<entry_id>/unread")
@login_required
def inbox_mark_unread(entry_id: str) -> Response:
    _checked_form()
    try:
        found = inbox.mark_unread(session(), caller_id(required=True), _entry_id(entry_id))
    except inbox.TwinUnread:
        session().rollback()
        flash(gettext("A newer unread notification about the same thing is in your inbox; "
                      "this one stays read."))
        return _back_to_inbox()
    if not found:
        abort(404)
    changed_mine()
    return _back_to_inbox()


@bp.post("/inbox/<entry_id>/dismiss")
@login_required
def inbox_dismiss(entry_id: str) -> Response:
    _checked_form()
    if not inbox.dismiss(session(), caller_id(required=True), _entry_id(entry_id)):
        abort(404)
    changed_mine()
    return _back_to_inbox()


@bp.post("/inbox/read-all")
@login_required
def inbox_mark_all_read() -> Response:
    _checked_form()
    count = inbox.mark_all_read(session(), caller_id(required=True), current_site_id())
    changed_mine()
    flash(ngettext("%(num)d notification marked as read.",
                   "%(num)d notifications marked as read.", count))
    return _back_to_inbox()
