"""What a request works out once and keeps for the rest of itself (the caller's facts,
her zone): asked by several parts of one page, worked out by the first.

Kept in the request's WSGI environ (the request's own: an app context, hence ``g``, may
outlive many requests, as in a test that signs in as someone else between two) and
forgotten when the request's context ends (:func:`forget`, a teardown). Why forgotten:
the server holds a streamed response's environ for as long as the stream is open, so
whatever a stream's request kept there stayed with every open stream for its life
(``bench/stream_memory.py --held``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import has_request_context, request

T = TypeVar("T")

_KEPT = "wikinotify.request_kept"


def kept(name: str, make: Callable[[], T]) -> T:
    """``make()``, called the first time this request asks for ``name``."""
    values: dict[str, Any] = request.environ.setdefault(_KEPT, {})
    if name not in values:
        values[name] = make()
    found: T = values[name]
    return found


def forget(_error: BaseException | None = None) -> None:
    """Forget what this request kept (the app's teardown of every request)."""
    if has_request_context():
        request.environ.pop(_KEPT, None)
