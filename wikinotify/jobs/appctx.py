"""The app a job runs under: the host wiki's, found the way the ``flask`` command finds it
(``FLASK_APP``, else ``wsgi.py`` or ``app.py`` in the working directory), built once per
process and never at import time."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from flask import Flask, current_app, has_app_context
from flask.cli import ScriptInfo

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
        yield current_app._get_current_object()
        return
    app = host_app()
    with app.app_context():
        yield app
