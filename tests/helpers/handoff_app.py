"""What the hand-off tests' gunicorn serves (tests/test_stream_handoff.py): the demo wiki as
the README serves it (``wsgi.py``, configured from ``FLASK_*`` variables), its streams'
checks and keep-alives every ``WIKINOTIFY_TEST_KEEPALIVE_SECONDS`` rather than every 25 s,
on a grid of a tenth of that rather than of whole seconds, so a test sees several in a few
seconds."""

from __future__ import annotations

import os

from wikinotify.blueprint import stream_life
from wsgi import app

stream_life.KEEPALIVE_SECONDS = float(os.environ["WIKINOTIFY_TEST_KEEPALIVE_SECONDS"])
stream_life.CHECK_GRID_SECONDS = stream_life.KEEPALIVE_SECONDS / 10

__all__ = ["app"]
