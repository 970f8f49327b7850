"""``GET /metrics``: wikinotify's Prometheus metrics (docs/operating.md#metrics), in the text
exposition format, read at scrape time (:mod:`wikinotify.metrics`).

Answered only to ``Authorization: Bearer <WIKINOTIFY_METRICS_TOKEN>``. Without the
setting, and to any request without that very token, it answers 404 as if it did not
exist: the figures describe the wiki's traffic, and a scanner learns nothing, not even
that there is something to guess. No session, no CSRF, no rate limit (neither
wikinotify's nor the wiki's own: Prometheus scrapes every few seconds from one address),
and not part of the JSON API's OpenAPI document.
"""

from __future__ import annotations

import hmac

from flask import Response, abort, current_app, request
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST

from .. import metrics
from ..config import config
from .core import bp, session, unlimited


def _token_given() -> bool:
    """Whether the request carries the configured token; compared in constant time, and
    never logged."""
    token: str | None = config("METRICS_TOKEN")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


@bp.get("/metrics")
@unlimited
def prometheus_metrics() -> ResponseReturnValue:
    if not _token_given():
        abort(404)
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    response = Response(metrics.exposition(app, session()), content_type=CONTENT_TYPE_LATEST)
    response.headers["Cache-Control"] = "no-store"
    return response
