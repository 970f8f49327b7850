"""The fan-out's own statements compiled before the worker forks (:func:`compile_reads`).

SQLAlchemy compiles a statement at its first execution in a process and keeps the compiled
form in the engine's cache, keyed by the statement's shape, not its values. RQ's forking
worker runs each job in a work horse forked for it, whose cache dies with it: every
fan-out compiled its statements again, some 9% of a 10,000-watcher fan-out on SQLite
(docs/benchmarks.md#sqlite-the-embedded-default). Compiled once in the worker, before it
forks, they are inherited by every horse, as the built app is. So are each batch's writes
(the entries' merge, the read marks' lock and probe, the cursor), which the writer's thread
compiled while the run decided the next batch on the same cores, and the event's mark.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from flask import Flask

from .. import preferences
from ..inbox import read_marks
from ..models import Event, InstanceSettings
from ..outbound import routing
from ..preferences import mutes
from ..state import state
from . import audience
from .claims import mark_processed
from .events import moved
from .rows import SHARED
from .upsert import compile_merge

log = logging.getLogger(__name__)

#: An id that names no one: the reads find nothing, and only their shape matters.
_NOBODY = ""
#: The id the wiki's reads are asked for: a number, as a wiki's keys often are (an empty
#: text would be refused before any statement), that names no account or page, or at
#: worst one read.
_NO_KEY = "0"


def compile_reads(app: Flask) -> None:
    """Run the reads every fan-out batch makes (and the event's and the settings' loads, the
    site-wide webhooks'), and its writes, once, for an id that names no one, in a
    transaction that is rolled back (the writes write nothing: the merge of no one, the
    cursor of no event), so that the engine's cache holds their compiled forms. A database
    that cannot answer yet (the schema not made) only costs the horses the compiling, as
    before: logged, never raised.

    The wiki's reads of every batch (its accounts' facts, a page's watchers, by keyset)
    are asked too, through the host interface: each is a read, whatever it finds, and a
    host whose reads refuse an id that names nothing only compiles them in each job."""
    st = state(app)
    with app.app_context():
        session = st.db.session()
        try:
            session.get(Event, 0)
            session.get(InstanceSettings, 0)
            mutes.muters_among(session, [_NOBODY], _NOBODY, _NOBODY)
            routing.endpoints_of(session, [_NOBODY], _NOBODY)
            preferences.schedules(session, [_NOBODY])
            # And what a run of many batches reads once instead (audience.read_for_run).
            mutes.muters(session, _NOBODY, _NOBODY, 1)
            routing.every_endpoint(session, _NOBODY, 1)
            preferences.every_schedule(session, 1)
            routing.site_wide_endpoints(session, _NOBODY)
            # One category is enough: its key is a bound value.
            if (key := next(iter(st.registry), None)) is not None:
                category = st.registry[key]
                audience.stored_preferences(session, category, [_NOBODY])
                audience.category_preferences(session, category, 1)
                session.execute(moved(Event(id=0), category, _NOBODY))
            session.execute(mark_processed(0))
            read_marks.writing_entries(session)
            read_marks.settle_for_fanout(session, _NOBODY, [])
            compile_merge(session, dict.fromkeys(SHARED))
        except sa.exc.SQLAlchemyError as error:
            log.info("wikinotify: the fan-out's reads are compiled by each job: %s", error)
        finally:
            session.rollback()
        try:
            st.host.users([_NO_KEY])
            st.host.page_watchers(_NO_KEY, after=None, limit=1)
            st.host.page_watchers(_NO_KEY, after=_NO_KEY, limit=1)
            # The wiki's read behind check_access (a group's grants), asked once per group
            # set of a job.
            checks = (c.access_checks for c in st.registry.values())
            if (permission := next((p for found in checks for p in found), None)) is not None:
                st.host.check_access(frozenset({_NO_KEY}), permission, {"path": ""})
        except Exception as error:  # noqa: BLE001 - the wiki's code: never stops the worker
            log.info("wikinotify: the wiki's reads are compiled by each job: %r", error)
        finally:
            st.db.session.rollback()
            st.db.session.remove()
