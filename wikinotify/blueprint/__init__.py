"""wikinotify's routes, as one blueprint the wiki registers (default ``/_notifications``)."""

from __future__ import annotations

from . import admin, inbox, openapi, preferences, unsubscribe  # noqa: F401  (each attaches its routes)
from .core import bp as blueprint

__all__ = ["blueprint"]
