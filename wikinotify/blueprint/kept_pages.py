"""A page of the inbox API given again from Redis (docs/rules.md#kept-pages).

The bell menu, and any app that polls the API, asks for the same page again and again
while nothing has changed. The full path loads the account (the wiki's SQL), reads the
page, asks the wiki about each entry's page and comment, the reader's permissions and the
actors' pictures, and presents thirty entries: thirteen times a trivial endpoint's time
(docs/benchmarks.md#the-inbox-at-scale). Where the wiki tells wikinotify of every change
to what a reader may see (``WIKINOTIFY_KEPT_PAGES``: every emitted event does, and
:meth:`~wikinotify.WikiNotify.access_changed`), that answer is kept in Redis at the
version of her entries (her summary's) joined with the wiki's, and the same request from
the same signed-in session is answered from it while both hold: for at most five
minutes, and only while the wiki has loaded the account in that time (the trust of the
summary's polls, :func:`wikinotify.inbox.live.trusted_page`). What is given again is the
answer she was given, word for word, but for its times, which are said afresh ("3 min
ago" ages) in the zone and language the page was read in. The request's query, its
``Accept-Language`` and the browser zone's cookie choose the page: asked otherwise, it is
another page.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from flask import current_app, request
from werkzeug.sansio.response import Response

from .. import catalogue, times
from ..config import config
from ..inbox import live
from ..login import session_user_id
from .core import current_site_id
from .reader_time import shown_in


def answer() -> Response | None:
    """The page kept for this very request, its times said now; ``None`` sends it down
    the full path (nothing kept at the current versions, the account not trusted, kept
    pages off, Redis unable to say)."""
    if not config("KEPT_PAGES"):
        return None
    me = session_user_id()
    if me is None:
        return None
    kept = live.trusted_page(current_app, me, current_site_id(), _shape())
    if kept is None:
        return None
    record = json.loads(kept)
    page, zone, locale = record["page"], record["zone"], record["locale"]
    items = page["items"]
    with catalogue.translating(locale):  # "just now" in her language
        shown = shown_in([datetime.fromisoformat(item["updatedAt"]) for item in items],
                         zone, locale)
    for item, when in zip(items, shown, strict=True):
        item["when"] = when
    return current_app.json.response(page)


def version(me: str) -> str | None:
    """The version to keep the page being read at, read *before* it is (a change
    committed meanwhile leaves it kept at a version already forgotten, never given);
    ``None`` when it is not to be kept: kept pages off, or an account the session did not
    sign in (an API token's)."""
    if not config("KEPT_PAGES") or session_user_id() != me:
        return None
    return live.page_version(current_app, me)


def keep(me: str, kept_at: str, page: dict[str, Any], zone: str, locale: str) -> None:
    """Keep the page the full path answered (its times said in ``zone`` and ``locale``)."""
    record = {"page": page, "zone": zone, "locale": locale}
    live.keep_page(current_app, me, current_site_id(), _shape(), kept_at,
                   json.dumps(record, separators=(",", ":")).encode())


def _shape() -> str:
    """What picks the page and says it: the query, the language the browser asks for and
    the zone it reports (:data:`wikinotify.times.BROWSER_ZONE_COOKIE`)."""
    asked = (request.query_string, request.headers.get("Accept-Language", "").encode(),
             (request.cookies.get(times.BROWSER_ZONE_COOKIE) or "").encode())
    return hashlib.sha256(b"\0".join(asked)).hexdigest()[:32]
