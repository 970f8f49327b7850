"""wikinotify's routes, as one blueprint the wiki registers (default ``/_notifications``)."""

from __future__ import annotations

# Each attaches its routes.
from . import admin, inbox, mutes, openapi, preferences, stream, unsubscribe  # noqa: F401
from .core import bp as blueprint

__all__ = ["blueprint"]
