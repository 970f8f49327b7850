"""The mail's one-click links: RFC 8058 unsubscribe (docs/rules.md#one-click-unsubscribe) and "Mute
this page" (docs/rules.md#mutes). Public: a mail client sends no session, no cookie and no CSRF
token, only the signed token in the URL.

``GET`` never changes anything (mail scanners follow every link): it shows a page that
names what the link does and offers the same POST. ``POST`` does it, is idempotent, and
(for a one-click client) answers 200 with an empty body; a bad token is a 400 that says
nothing more, and past the refusals' rate a 429.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask import render_template, request
from flask.typing import ResponseReturnValue
from flask_babel import gettext

from .. import preferences, ratelimit
from ..instance_settings import instance_settings
from ..mail import drain
from ..mail.tokens import (
    BadToken,
    MutePage,
    Unsubscribe,
    make_resubscribe_token,
    read_mute_token,
    read_resubscribe_token,
    read_token,
)
from ..models import MuteKind
from ..openapi import operation
from ..preferences import mutes
from ..state import state
from .core import bp, session


def _token_in_query(description: str) -> dict[str, Any]:
    """The document's ``t``: the signed token, in the query (or in the form)."""
    return {"in": "query", "name": "t", "required": False, "description": description,
            "schema": {"type": "string"}}


def _token() -> Unsubscribe:
    return read_token(_secret(), request.values.get("t", ""))


def _refused_too_often() -> bool:
    """Count a refused token (to unsubscribe, subscribe again or mute: one allowance) against the
    client's address and against the token itself
    (:func:`wikinotify.ratelimit.refused_too_often`)."""
    return ratelimit.refused_too_often("unsubscribe", request.values.get("t", ""))


#: How a one-click POST refuses, in the API's description.
REFUSALS = {
    400: "The token is not valid (nothing says which part failed); no body.",
    413: "The body is over 64 kB.",
    429: "Too many refused tokens from this client or for this token; try later. "
    "A valid token is never refused this way. No body.",
}


def _category_titles(keys: Iterable[str]) -> list[str]:
    registry = state().registry
    return [gettext(registry[k].title) for k in keys if k in registry]


@bp.get("/unsubscribe")
def unsubscribe_page() -> ResponseReturnValue:
    try:
        token = _token()
    except BadToken:
        return render_template("wikinotify/unsubscribe.html", invalid=True), 400
    return render_template(
        "wikinotify/unsubscribe.html",
        invalid=False,
        token=request.args["t"],
        titles=_category_titles(token.categories),
    )


@bp.post("/unsubscribe")
@operation(
    summary="RFC 8058 one-click unsubscribe",
    description="Public: no session, no CSRF token. The signed token `t` comes in "
    "the query (as in the mail's `List-Unsubscribe` URL) or in the form. Turns email "
    "off for the token's categories and answers 200 with an empty body; idempotent.",
    security=[],
    parameters=[_token_in_query("The token from the mail's `List-Unsubscribe` URL.")],
    form={
        "type": "object",
        "properties": {
            "List-Unsubscribe": {"type": "string", "enum": ["One-Click"]},
            "t": {"type": "string"},
        },
        "required": ["List-Unsubscribe"],
    },
    ok={200: ("Unsubscribed; no body.", None)},
    plain_errors=REFUSALS,
)
def unsubscribe() -> ResponseReturnValue:
    try:
        token = _token()
    except BadToken:
        return "", 429 if _refused_too_often() else 400
    scope_all = request.form.get("scope") == "all"
    changed = _turn_email_off(token, scope_all)
    if request.form.get("List-Unsubscribe") == "One-Click":
        return "", 200  # RFC 8058: the mail client wants a 200, nothing to show
    # "Subscribe again" carries a token of its own purpose, short-lived, naming what this
    # turned off: the mailed token only ever turns mail off. Nothing turned off, no button.
    again = make_resubscribe_token(_secret(), token.user_id, changed) if changed else None
    return render_template(
        "wikinotify/unsubscribe.html", invalid=False, done=True, scope_all=scope_all,
        titles=_category_titles(token.categories), token=request.values.get("t"),
        again=again,
    )


@bp.post("/resubscribe")
@operation(
    summary="Subscribe again after an unsubscribe",
    description="Public, like `POST /unsubscribe`: no session, no CSRF token; the "
    "signed token `t` in the query or the form (the unsubscribe confirmation's "
    "\"Subscribe again\" button). Turns email back on for the token's categories, "
    "in-app choices unchanged, and answers a page saying so; idempotent. Mail that the "
    "unsubscribe cancelled stays cancelled.",
    security=[],
    parameters=[_token_in_query("The token of the unsubscribe confirmation (it works for a "
                                "day; a mailed unsubscribe token is refused).")],
    form={"type": "object", "properties": {"t": {"type": "string"}}},
    ok={200: ("Subscribed again; an HTML page.", None)},
    plain_errors={
        400: "The token is not valid (nothing says which part failed); an HTML page.",
        413: "The body is over 64 kB.",
        429: "Too many refused tokens from this client or for this token; try later.",
    },
)
def resubscribe() -> ResponseReturnValue:
    try:
        token = read_resubscribe_token(_secret(), request.values.get("t", ""))
    except BadToken:
        code = 429 if _refused_too_often() else 400
        return render_template("wikinotify/unsubscribe.html", invalid=True), code
    _turn_email_on(token)
    return render_template("wikinotify/unsubscribe.html", invalid=False, resubscribed=True,
                           titles=_category_titles(token.categories))


def _secret() -> bytes:
    return instance_settings(session()).unsubscribe_secret


def _turn_email_off(token: Unsubscribe, scope_all: bool) -> list[str]:
    """Turn email off; the categories it was on for."""
    st = state()
    if st.host.user(token.user_id) is None:
        return []  # the account is gone, and its preferences with it: nothing to turn off
    keys = list(st.registry) if scope_all else [k for k in token.categories if k in st.registry]
    changed = preferences.stop_all_email(session(), token.user_id,
                                         [st.registry[k] for k in keys])
    drain.skip_pending(session(), token.user_id, keys)
    _audited("unsubscribeNotifications", token, changed, "all" if scope_all else "mail")
    return changed


def _turn_email_on(token: Unsubscribe) -> None:
    """Turn email on again for the token's categories. Mail cancelled meanwhile stays
    cancelled: it was meant for then (docs/rules.md#one-click-unsubscribe)."""
    st = state()
    if st.host.user(token.user_id) is None:
        return
    categories = [st.registry[k] for k in token.categories if k in st.registry]
    changed = preferences.resume_email(session(), token.user_id, categories)
    _audited("resubscribeNotifications", token, changed, "mail")


def _audited(action: str, token: Unsubscribe, changed: list[str], scope: str) -> None:
    if changed:
        # No session here: the token's user is the actor, identified by the credential.
        state().host.audit(action, actor_id=token.user_id, kind="profile",
                           details={"categories": changed, "scope": scope})
    session().commit()


# -- "Mute this page" ---------------------------------------------------------------------


def _mute_token() -> MutePage:
    token = request.values.get("t", "")
    return read_mute_token(instance_settings(session()).unsubscribe_secret, token)


def _readable_title(token: MutePage) -> str | None:
    """The page's title, where the token's reader may still read the page."""
    host = state().host
    reader = host.user(token.user_id)
    page = host.pages([token.page_id]).get(token.page_id)
    if reader is None or page is None:
        return None
    return page.get("title") if host.check_access(reader.group_ids, "read:pages", page) else None


@bp.get("/mute")
def mute_page() -> ResponseReturnValue:
    try:
        token = _mute_token()
    except BadToken:
        return render_template("wikinotify/mute_link.html", invalid=True), 400
    return render_template("wikinotify/mute_link.html", invalid=False, token=request.args["t"],
                           title=_readable_title(token))


@bp.post("/mute")
@operation(
    summary="One-click \"Mute this page\" from a mail",
    description="Public: no session, no CSRF token. The signed token `t` (from the "
    "mail's link) names the reader and the page. Mutes the page for her, as "
    "`PUT /api/mutes` does (the mail still waiting about it is cancelled); idempotent.",
    security=[],
    parameters=[
        {"in": "query", "name": "t", "required": False,
         "description": "The token from the mail's \"Mute this page\" link.",
         "schema": {"type": "string"}},
    ],
    ok={200: ("Muted: the confirmation page.", None)},
    plain_errors=REFUSALS,
)
def mute_from_mail() -> ResponseReturnValue:
    try:
        token = _mute_token()
    except BadToken:
        return "", 429 if _refused_too_often() else 400
    if state().host.user(token.user_id) is not None:  # a gone account has no mutes
        mutes.mute(session(), token.user_id, MuteKind.PAGE, token.page_id)
        session().commit()
    return render_template("wikinotify/mute_link.html", invalid=False, done=True,
                           title=_readable_title(token))
