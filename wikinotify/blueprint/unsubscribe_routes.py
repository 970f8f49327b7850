"""RFC 8058 one-click unsubscribe (docs/rules.md#one-click-unsubscribe). Public: a mail client sends
no session, no cookie and no CSRF token, only the signed token in the URL.

``GET`` never changes anything (mail scanners follow every link): it shows a page that
names the categories and offers the same POST. ``POST`` turns email off, is idempotent,
and answers 200 with an empty body; a bad token is a 400 that says nothing more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from flask import render_template, request
from flask.typing import ResponseReturnValue
from flask_babel import gettext

from .. import preferences, ratelimit
from ..config import config
from ..instance_settings import instance_settings
from ..mail import drain
from ..mail.tokens import BadToken, Unsubscribe, read_token
from ..openapi import operation
from ..state import state
from .core import bp, session


def _token() -> Unsubscribe:
    token = request.values.get("t", "")
    return read_token(instance_settings(session()).unsubscribe_secret, token)


def _refused_too_often() -> bool:
    """Count a refused token against the client's address and against the token itself;
    past ``WIKINOTIFY_UNSUBSCRIBE_RATE`` a minute, refusals become 429s.

    Only refusals count: a valid token always works, so junk from one address (or from
    everyone behind a proxy the wiki did not set ``ProxyFix`` up for) never locks out a
    real unsubscribe. Redis unreachable never turns a refusal into a 429 on its own.
    """
    token = request.values.get("t", "")
    digest = hashlib.sha256(token.encode(errors="replace")).hexdigest()[:32]
    rate = f"{config('UNSUBSCRIBE_RATE')}/minute"
    keys = [("unsubscribe", "client", str(request.remote_addr)),
            ("unsubscribe", "token", digest)]
    return not ratelimit.within(rate, *keys)


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
    parameters=[
        {"in": "query", "name": "t", "required": False,
         "description": "The token from the mail's `List-Unsubscribe` URL.",
         "schema": {"type": "string"}},
    ],
    form={
        "type": "object",
        "properties": {
            "List-Unsubscribe": {"type": "string", "enum": ["One-Click"]},
            "t": {"type": "string"},
        },
        "required": ["List-Unsubscribe"],
    },
    ok={200: ("Unsubscribed; no body.", None)},
    plain_errors={
        400: "The token is not valid (nothing says which part failed); no body.",
        413: "The body is over 64 kB.",
        429: "Too many refused tokens from this client or for this token; try later. "
        "A valid token is never refused this way. No body.",
    },
)
def unsubscribe() -> ResponseReturnValue:
    try:
        token = _token()
    except BadToken:
        return "", 429 if _refused_too_often() else 400
    scope_all = request.form.get("scope") == "all"
    _turn_email_off(token, scope_all)
    if request.form.get("List-Unsubscribe") == "One-Click":
        return "", 200  # RFC 8058: the mail client wants a 200, nothing to show
    return render_template(
        "wikinotify/unsubscribe.html", invalid=False, done=True, scope_all=scope_all,
        titles=_category_titles(token.categories), token=request.values.get("t"),
    )


def _turn_email_off(token: Unsubscribe, scope_all: bool) -> None:
    st = state()
    if st.host.user(token.user_id) is None:
        return  # the account is gone, and its preferences with it: nothing to turn off
    keys = list(st.registry) if scope_all else [k for k in token.categories if k in st.registry]
    categories = [st.registry[k] for k in keys]
    changed = preferences.stop_all_email(session(), token.user_id, categories)
    drain.skip_pending(session(), token.user_id, keys)
    if changed:
        # No session here: the token's user is the actor, identified by the credential.
        st.host.audit(
            "unsubscribeNotifications",
            actor_id=token.user_id,
            kind="profile",
            details={"categories": changed, "scope": "all" if scope_all else "mail"},
        )
    session().commit()
