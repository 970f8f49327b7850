"""wikinotify's routes, as one blueprint the wiki registers (default ``/_notifications``)."""

from __future__ import annotations

# Each attaches its routes.
from . import (  # noqa: F401
    admin_routes,
    announcement_routes,
    feed_routes,
    health_routes,
    inbox_routes,
    metrics_routes,
    mutes_routes,
    openapi_routes,
    preferences_routes,
    push_routes,
    reader_time,
    stream_routes,
    unsubscribe_routes,
    webhook_pages_routes,
    webhooks_routes,
)
from .core import bp as blueprint

__all__ = ["blueprint"]
