"""wikinotify's routes, as one blueprint the wiki registers (default ``/_notifications``)."""

from __future__ import annotations

from . import inbox, preferences  # noqa: F401  (each attaches its routes to the blueprint)
from .core import bp as blueprint

__all__ = ["blueprint"]
