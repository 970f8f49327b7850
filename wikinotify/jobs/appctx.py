"""The app a job runs under: the host wiki's, found the way the ``flask`` command finds it
(``FLASK_APP``, else ``wsgi.py`` or ``app.py`` in the working directory), built once per
process and never at import time."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from flask import Flask, current_app, has_app_context
from flask.cli import ScriptInfo

from ..state import State, state

log = logging.getLogger(__name__)

_app: Flask | None = None


def host_app() -> Flask:
    global _app
    if _app is None:
        _app = ScriptInfo(app_import_path=os.environ.get("FLASK_APP")).load_app()
    return _app


@contextlib.contextmanager
def app_context() -> Iterator[Flask]:
    """The current app if there is one (a test, a CLI command), else the host's."""
    if has_app_context():
        # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
        yield current_app._get_current_object()  # type: ignore[attr-defined]
        return
    app = host_app()
    with app.app_context():
        yield app


@contextlib.contextmanager
def running(job: str) -> Iterator[tuple[Flask, State]]:
    """A job's frame: the app and its state; a failure is logged and re-raised so RQ
    records it; the session is given back whatever happens."""
    with app_context() as app:
        st = state(app)
        try:
            yield app, st
        except Exception:
            log.exception("wikinotify: %s failed", job)
            raise
        finally:
            st.db.session.remove()
