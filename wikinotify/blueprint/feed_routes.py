"""The reader's inbox as an Atom feed (docs/rules.md#the-feed), and the preferences page's
button that resets its link.

The feed is public like the one-click unsubscribe: a feed reader sends no session, no
cookie, only the signed token in the URL. Every refusal (a forged or revoked token, an
account gone or inactive) is the same 404, and refusals are rate-limited as
unsubscribe's are.
"""

from __future__ import annotations

import hashlib

from flask import abort, current_app, flash, redirect, request, url_for
from flask.typing import ResponseReturnValue
from flask_babel import gettext
from flask_wtf import FlaskForm
from werkzeug.wrappers import Response

from .. import ratelimit
from ..host import SiteFacts
from ..inbox import feed
from ..instance_settings import instance_settings
from ..login import caller_id, login_required
from ..state import state
from .core import bp, current_site_id, session


def _site() -> SiteFacts:
    site = state().host.site(current_site_id())
    if site is None:
        abort(404)
    return site


def feed_url() -> str:
    """The signed-in reader's feed URL, her link's version made on first use and
    committed (the page must show a link that works). The preferences view calls it before
    it renders: a template never commits, since mid-render it would commit whatever the
    host has pending in the request."""
    secret = instance_settings(session()).unsubscribe_secret
    token = feed.token_for(session(), secret, caller_id(required=True))
    session().commit()
    return feed.url(_site(), token)


def existing_feed_url() -> str | None:
    """The signed-in reader's feed URL if she has a link already, for the inbox's
    ``<link rel="alternate">`` (docs/rules.md#the-feed): her own, never anyone else's."""
    secret = instance_settings(session()).unsubscribe_secret
    token = feed.existing_token(session(), secret, caller_id(required=True))
    return None if token is None else feed.url(_site(), token)


def _refused(token: str) -> Response:
    return current_app.response_class(
        status=429 if ratelimit.refused_too_often("feed", token) else 404)


@bp.get("/feed/<token>.atom")
def feed_atom(token: str) -> ResponseReturnValue:
    st = state()
    try:
        reader = feed.reader_of(session(), instance_settings(session()).unsubscribe_secret,
                                token)
    except feed.BadToken:
        return _refused(token)
    user = st.host.user(reader)
    if user is None or not user.can_receive:
        return _refused(token)
    made = feed.read(session(), st.host, st.registry, user, _site(), token)
    response = current_app.response_class(made.body, content_type=feed.CONTENT_TYPE)
    # The user is in the body (her feed's id): no two readers share a tag.
    response.set_etag(hashlib.sha256(made.body).hexdigest()[:32])
    response.last_modified = made.updated
    response.headers["Cache-Control"] = "private, no-cache"
    return response.make_conditional(request)


@bp.post("/preferences/feed/reset")
@login_required
def preferences_feed_reset() -> ResponseReturnValue:
    """A new feed link; the old one answers 404 from now on."""
    if not FlaskForm().validate_on_submit():
        abort(400, gettext("Your session has expired. Reload the page and try again."))
    me = caller_id(required=True)
    feed.reset(session(), me)
    # Audited as the other changes to her account's notifications are: a credential ended.
    state().host.audit("resetNotificationFeed", actor_id=me, kind="profile", details={})
    session().commit()
    flash(gettext("Your feed has a new link. The old one no longer works."))
    return redirect(url_for(".preferences_page", _anchor="wn-feed"))
