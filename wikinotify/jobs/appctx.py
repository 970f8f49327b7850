"""The app a job runs under: the host wiki's, found the way the ``flask`` command finds it
(``FLASK_APP``, else ``wsgi.py`` or ``app.py`` in the working directory), built once per
process and never at import time.

RQ's forking worker runs each job in a work horse forked for it, so with a plain
``rq worker`` every job imports wikinotify and builds the app afresh (2 s on a busy
machine: most of a small mail run). :class:`Worker` is that same forking worker with the
app built once, in the worker, before its first fork: ``rq worker -w
wikinotify.jobs.appctx.Worker ...``."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Iterator
from typing import Any

import rq
from babel import Locale
from flask import Flask, current_app, has_app_context
from flask.cli import ScriptInfo
from flask_babel import force_locale, get_translations
from sqlalchemy.orm import configure_mappers

from .. import telemetry
from ..blueprint import blueprint
from ..config import ConfigError
from ..outbound import secrets_box
from ..pipeline.warm import compile_reads
from ..queue import Job
from ..state import State, state

log = logging.getLogger(__name__)

_app: Flask | None = None


def host_app() -> Flask:
    """The wiki's app, built once per process; refused, naming the fix, when its jobs
    could only fail, each of them, late (:func:`_unfit`). Unless the wiki set logging up
    itself, a handler prints wikinotify's lines to the worker's output (a plain ``rq
    worker`` configures only RQ's own logger)."""
    global _app
    if _app is None:
        app = ScriptInfo(app_import_path=os.environ.get("FLASK_APP")).load_app()
        if (problem := _unfit(app)) is not None:
            raise ConfigError(f"The app the worker built ({app.import_name}, found as the "
                              f"flask command finds it: FLASK_APP, else wsgi.py) {problem}")
        telemetry.log_to_stderr_unless_configured()
        _app = app
    return _app


def _unfit(app: Flask) -> str | None:
    if blueprint not in app.blueprints.values():
        # Every mail links to its pages (unsubscribe, the inbox).
        return ("has not registered wikinotify's blueprint, whose pages every mail links "
                "to: call app.register_blueprint(wikinotify.blueprint) in the app factory.")
    if (missing := secrets_box.missing_key(app)) is not None:
        return (f"{missing}: give the workers the web's (FLASK_SECRET_KEY), which opens "
                "what the web sealed.")
    return None


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
def running(job: Job) -> Iterator[tuple[Flask, State]]:
    """A job's frame: the app and its state; a failure is logged and re-raised so RQ
    records it; the session is given back whatever happens. Python's collector looks
    only at what the job makes (:func:`collecting_only_new`)."""
    with app_context() as app, collecting_only_new():
        st = state(app)
        try:
            yield app, st
        except Exception:
            log.exception("wikinotify: %s failed", job)
            raise
        finally:
            st.db.session.remove()


@contextlib.contextmanager
def collecting_only_new() -> Iterator[None]:
    """Leave everything that exists now out of Python's cyclic collections until the
    block ends (``gc.freeze``). A job makes objects by the batch (5,000 recipients' facts,
    rows and tuples), which live through a few young collections and are promoted to the
    oldest generation, and each full collection that follows walks the whole process
    too: the app, SQLAlchemy, every module. In a fan-out to 100,000 watchers that was 1.7
    of its 4 CPU-seconds of Python (bench/fanout.py); with the process frozen, 0.4. What
    the job makes is still collected as before: its memory stays flat."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


#: What a work horse would otherwise load at its first mail: the mail templates.
_MAIL_TEMPLATES = tuple(f"wikinotify/mail/{name}.{kind}" for name in ("notification", "digest")
                        for kind in ("txt", "html"))


def preload() -> Flask:
    """Build the host's app in this process, with what every job's first use would load:
    the jobs' modules, the ORM's mappers configured, the fan-out's reads compiled, the
    mail templates compiled, each language's catalogue and Babel's data for it. Then close
    whatever database connection that opened, so that no forked work horse shares one."""
    from .. import jobs  # noqa: F401  (the job functions a work horse looks up)
    from ..config import config

    app = host_app()
    # SQLAlchemy configures every mapper (the wiki's and wikinotify's) at the first query
    # of a process: left to the horses, each did it again, a sixth of a 10,000-watcher
    # fan-out on SQLite.
    configure_mappers()
    # And compiles the fan-out's reads at each horse's first batch: compiled here, once.
    compile_reads(app)
    with app.app_context():
        for name in _MAIL_TEMPLATES:
            app.jinja_env.get_template(name)
        for locale in config("LANGUAGES", app):
            with force_locale(locale):
                get_translations()
            # Babel's data for the language (a mail's times), loaded once for every horse.
            Locale.parse(locale).datetime_formats  # noqa: B018
        for engine in state(app).db.engines.values():
            engine.dispose()
    return app


class Worker(rq.Worker):
    """RQ's forking worker, each job still in a work horse of its own, but with the app
    built before the worker registers (:func:`preload`): a horse inherits it, ready."""

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        app = preload()
        super().bootstrap(*args, **kwargs)
        self.log.info("Worker %s: %s is built; each work horse inherits it", self.name,
                      app.import_name)
