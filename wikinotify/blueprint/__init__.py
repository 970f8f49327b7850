"""wikinotify's routes, as one blueprint the wiki registers (default ``/_notifications``)."""

from __future__ import annotations

# Each attaches its routes.
from . import (  # noqa: F401
    admin,
    inbox,
    mutes,
    openapi,
    preferences,
    stream,
    unsubscribe,
    webhook_pages,
    webhooks,
)
from .core import bp as blueprint

__all__ = ["blueprint"]
