"""Whether wikinotify can work (docs/operating.md#health-checks): the database answers,
Redis answers, and the schema is at wikinotify's Alembic head.

``GET /readyz`` and ``flask wikinotify status`` (its exit status 2) ask the same checks.
Each check answers within ``WIKINOTIFY_READY_TIMEOUT`` whatever the dependency does: it
runs in a thread of its own that the caller waits for that long, and while one check of a
dependency is still hanging, the next is not started but answered "down", so a wedged
database costs one thread, not one per probe. What failed is logged by its class only: an
exception's text may carry an address or a user name.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from alembic.script import ScriptDirectory
from flask import Flask
from sqlalchemy.engine import Engine

from . import queue
from .migrations import VERSIONS
from .state import state

log = logging.getLogger(__name__)

#: wikinotify's Alembic branch label (wikinotify/migrations).
BRANCH = "wikinotify"
#: A table wikinotify's first revision creates: present, the branch was applied.
SOME_TABLE = "wikinotify_events"

OK = "ok"
DOWN = "down"

_lock = threading.Lock()
#: Per dependency (its URL): the check still running, if one is.
_running: dict[str, threading.Thread] = {}
#: Engines whose database was found at the head: asked once per engine, so once per
#: process (a schema does not go back).
_at_head: weakref.WeakSet[Engine] = weakref.WeakSet()


@dataclass(frozen=True)
class Readiness:
    """``"ok"`` or ``"down"`` for each of ``database``, ``redis`` and ``schema``."""

    database: str
    redis: str
    schema: str

    @property
    def ready(self) -> bool:
        return self.database == self.redis == self.schema == OK

    def as_dict(self) -> dict[str, str]:
        return {"database": self.database, "redis": self.redis, "schema": self.schema}


def readiness(app: Flask) -> Readiness:
    """Ask the database, Redis and the schema (the schema only when the database
    answered)."""
    database = check_database(app)
    schema = check_schema(app) if database else False
    return Readiness(database=_word(database), redis=_word(check_redis(app)),
                     schema=_word(schema))


def check_database(app: Flask) -> bool:
    """Whether the database answers a ``SELECT 1`` in time."""
    engine = _engine(app)
    return _bounded(app, f"database:{engine.url}", lambda: _select_one(engine))


def check_redis(app: Flask) -> bool:
    """Whether Redis answers a ``PING`` in time."""
    client = queue.probe_client(app)
    return _bounded(app, f"redis:{queue.redis_url(app)}", client.ping)


def check_schema(app: Flask) -> bool:
    """Whether the database holds wikinotify's schema at this code's head: its
    ``alembic_version`` rows hold the branch's head. A database whose rows hold none of
    this branch's revisions while its tables exist was migrated by a newer wikinotify
    (during a rolling upgrade): that is ready too, as revisions add before they remove."""
    engine = _engine(app)
    if engine in _at_head:
        return True
    found: list[bool] = []
    if not _bounded(app, f"schema:{engine.url}", lambda: found.append(_schema_current(engine))):
        return False
    if found == [True]:
        with _lock:
            _at_head.add(engine)
    return found == [True]


def branch_revisions() -> tuple[str, list[str]]:
    """wikinotify's head revision and every revision of its branch."""
    scripts = ScriptDirectory(VERSIONS, version_locations=[VERSIONS])
    revisions = [script.revision for script in scripts.walk_revisions()]
    return scripts.get_current_head() or "", revisions


def _schema_current(engine: Engine) -> bool:
    head, ours = branch_revisions()
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return False
        rows = set(connection.scalars(sa.text("SELECT version_num FROM alembic_version")))
        if head in rows:
            return True
        if rows & set(ours):
            return False  # an older revision of ours: the upgrade has not run
        return sa.inspect(connection).has_table(SOME_TABLE)


def _engine(app: Flask) -> Engine:
    with app.app_context():
        return state(app).db.engine


def _select_one(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(sa.text("SELECT 1"))


def _word(ok: bool) -> str:
    return OK if ok else DOWN


def _bounded(app: Flask, name: str, check: Callable[[], object]) -> bool:
    """Run ``check`` in a thread and wait ``WIKINOTIFY_READY_TIMEOUT`` for it; ``False``
    when it raised, did not end in time, or the previous check of ``name`` still runs."""
    outcome: list[bool] = []

    def run() -> None:
        try:
            check()
        except Exception as error:  # any failure at all means "down", and says which
            log.warning("wikinotify: readiness: %s failed (%s)", name.split(":")[0],
                        type(error).__name__)
            outcome.append(False)
        else:
            outcome.append(True)

    with _lock:
        previous = _running.get(name)
        if previous is not None and previous.is_alive():
            return False
        thread = _running[name] = threading.Thread(
            target=run, name=f"wikinotify-readiness-{name.split(':')[0]}", daemon=True)
    thread.start()
    thread.join(float(app.config["WIKINOTIFY_READY_TIMEOUT"]))
    return outcome == [True]
