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
another page. Once the view has answered a request so, the very same request again is
answered before Flask dispatches it (:mod:`.unchanged_polls`), by the same
:func:`told`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import zlib
from datetime import datetime
from typing import Any, NamedTuple

from flask import Flask, current_app, request
from werkzeug.wrappers import Response

from .. import times
from ..catalogue import gettext
from ..config import config
from ..inbox import live
from ..login import session_user_id
from .core import current_site_id
from .reader_time import shown_in

log = logging.getLogger(__name__)

#: An account keeps at most this many pages on a site, for five minutes at most: one
#: account cannot fill Redis by asking for pages of every shape (a query, a language
#: and a zone of its choosing each). A page of another shape in its slot takes its place.
#: Kept compressed: a page of thirty entries is some 20 KB of JSON, 4 KB so.
SLOTS = 4

#: Where the shortcut before Flask (:mod:`.unchanged_polls`), having found no page kept
#: for a request, leaves the version it read (``None``: some of it missing), so the view
#: does not read it again (:func:`look`).
LOOKED_UP = "wikinotify.kept_page_looked_up"


class Kept(NamedTuple):
    """A request answered from a kept page: the answer, and whose page it was."""

    response: Response
    user_id: str
    site_id: str | None
    shape: str


class Look(NamedTuple):
    """What :func:`look` found: the kept page's answer, if any; else the version to keep
    the page read afresh at, read before the account is loaded, the session's account it
    is for (``None``: nothing to keep), and the site and shape it was looked for by."""

    kept: Kept | None = None
    version: str | None = None
    user_id: str | None = None
    site_id: str | None = None
    shape: str = ""

    @property
    def shared_version(self) -> str | None:
        """:attr:`version` but her own part (her summary's, everyone's, the wiki's): what
        the wiki and the site switch said is kept at it (:mod:`wikinotify.wiki_said`)."""
        return None if self.version is None else self.version.split(":", 1)[-1]


def look() -> Look:
    """The page kept for this very request, its times said now; else the version to keep
    the page at once it is read afresh. Read first of all, before the wiki loads the
    account and before the site switch and the page are read: a change committed after it
    forgets it, so a page read from what was before is never given at a newer version
    (docs/rules.md#kept-pages)."""
    if not config("KEPT_PAGES"):
        return Look()
    me = session_user_id()
    if me is None:
        return Look()
    site_id, shape = current_site_id(), _shape()
    if LOOKED_UP in request.environ:
        version, kept = request.environ[LOOKED_UP], None
    else:
        version, kept = live.look_page(current_app, me, site_id, slot(shape))
    body = told(current_app, kept, shape)
    if body is not None:
        response = current_app.response_class(body, mimetype="application/json")
        return Look(Kept(response, me, site_id, shape))
    return Look(None, version, me, site_id, shape)


def slot(shape: str) -> str:
    """Where a page of this shape is kept among an account's few on a site
    (:data:`SLOTS`)."""
    return str(int(shape[:8], 16) % SLOTS)


def told(app: Flask, kept: bytes | None, shape: str) -> bytes | None:
    """The page kept in ``shape``'s slot, if it is that shape's: its JSON, each entry's
    time said now, in the zone and language it was read in (this needs no request: the
    same request may be answered before Flask). The page is kept as its JSON cut where
    each time goes (:func:`keep`), so saying them is a join, not the page parsed and
    written again."""
    if kept is None:
        return None
    kept_shape, _, packed = kept.partition(b"|")
    if kept_shape != shape.encode():  # another page of hers, in the same slot
        return None
    try:
        said, *parts = zlib.decompress(packed).decode().split(_CUT)
        record = json.loads(said)
        if len(parts) != len(record["whens"]) + 1:
            raise ValueError(f"{len(parts)} parts for {len(record['whens'])} times")
        shown = shown_in([datetime.fromisoformat(when) for when in record["whens"]],
                         record["zone"], record["locale"], record["justNow"])
        return _joined(app, parts, shown)
    except (ValueError, KeyError, TypeError, zlib.error) as error:  # not one keep() wrote
        log.warning("wikinotify: a kept inbox page that cannot be read (%s)", error)
        return None


def keep(look: Look, page: dict[str, Any], zone: str, locale: str) -> Response | None:
    """Keep the page the full path read for ``look`` (its times said in ``zone`` and
    ``locale``, "just now" in the request's language, which is hers): its JSON as Flask
    writes it, cut where each entry's time goes, and the instants to say there. The
    answer, made of the same JSON (``None``: not kept, for a JSON provider of the wiki's
    that writes the cut otherwise)."""
    if look.version is None or look.user_id is None:
        return None
    items = page["items"]
    marked = {**page, "items": [{**item, "when": f"{_MARK}{n}"} for n, item in
                                enumerate(items)]}
    parts = re.split(_MARKED, current_app.json.dumps(marked))
    if len(parts) != len(items) + 1:
        return None
    record = {"whens": [item["updatedAt"] for item in items], "zone": zone,
              "locale": locale, "justNow": gettext("just now")}
    # The parts as they are, not as strings in the record's JSON (escaped on the way in
    # and parsed on the way out, the page's whole JSON twice), cut where no JSON has a
    # NUL (JSON writes it escaped).
    packed = zlib.compress(_CUT.join([json.dumps(record, separators=(",", ":")), *parts])
                           .encode(), 1)
    live.keep_page(current_app, look.user_id, look.site_id, slot(look.shape), look.version,
                   look.shape.encode() + b"|" + packed)
    return current_app.response_class(
        _joined(current_app, parts, [item["when"] for item in items]),
        mimetype="application/json")


def _joined(app: Flask, parts: list[str], whens: list[dict[str, str]]) -> bytes:
    """A page's JSON from its cut (:func:`keep`) and its times."""
    said = [app.json.dumps(when) for when in whens]
    return "".join(part for pair in zip(parts, [*said, ""], strict=True)
                   for part in pair).encode()


#: What separates a kept record's parts: the times' record, then the page's JSON cut.
_CUT = "\0"
#: Where :func:`keep` cuts a page's JSON: a string no entry's value holds (a NUL, which
#: JSON writes escaped, and a random word), then the entry's number.
_MARK = "\0wn-when-" + secrets.token_hex(8) + "-"
_MARKED = re.compile(re.escape(json.dumps(_MARK)[:-1]) + r'\d+"')


def _shape() -> str:
    """What picks the page and says it: the query, the language the browser asks for and
    the zone it reports (:data:`wikinotify.times.BROWSER_ZONE_COOKIE`)."""
    asked = (request.query_string, request.headers.get("Accept-Language", "").encode(),
             (request.cookies.get(times.BROWSER_ZONE_COOKIE) or "").encode())
    return hashlib.sha256(b"\0".join(asked)).hexdigest()[:32]
