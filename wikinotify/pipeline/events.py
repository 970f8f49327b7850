"""Dispatching the outbox: a run claims a batch of events (:func:`dispatch`) and fans each
out (:func:`fan_out`), category by category, highest priority first
(docs/rules.md#claiming-events)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..categories import Category, FanoutContext, Registry
from ..host import Host
from ..models import Event, Notification, utcnow
from ..outbound import routing
from . import ranges
from .batch_writer import BatchWriter
from .claims import claim_events, mark_processed, release_events, unclaim, worker_id
from .failures import record_failure
from .rows import entry_rows
from .run import EventRun, settle, start
from .walk import Walk, walk

log = logging.getLogger(__name__)


@dataclass
class DispatchReport:
    claimed: int = 0
    finished: int = 0
    #: Events split into ranges, which ``fanout_range`` jobs fan out.
    split: int = 0
    deferred: int = 0
    #: Events whose attempt failed (backed off, or dead letters).
    failed: int = 0
    #: Entries the run's fan-outs wrote (new or coalesced), deferred ones' included.
    written: int = 0
    #: The events claimed, those whose attempt failed, and those of them that are dead
    #: letters now: the ids an operator looks for in the run's log line.
    event_ids: list[int] = field(default_factory=list)
    failed_ids: list[int] = field(default_factory=list)
    dead_ids: list[int] = field(default_factory=list)
    #: Whether the run ended early because the database connection was lost.
    interrupted: bool = False
    started_at: datetime = field(default_factory=utcnow)


def dispatch(
    ctx: FanoutContext,
    registry: Registry,
    *,
    mail_on: bool,
    budget: float,
    stale_after: timedelta,
    me: str | None = None,
    report: DispatchReport | None = None,
) -> DispatchReport:
    """One run: claim a batch of events and fan each out within ``budget`` seconds,
    counted in ``report`` (the caller's, which it may read however the run ends) or a
    new one."""
    session = ctx.session
    me = me or worker_id()
    deadline = time.monotonic() + budget
    report = report or DispatchReport()
    for event_id in claim_events(session, me=me, stale_after=stale_after):
        report.claimed += 1
        report.event_ids.append(event_id)
        try:
            # Claimed just now by this run, so it is there (else: a failed attempt).
            event = session.get_one(Event, event_id)
            categories = registry.listening(event.kind, event.origin)
            finished = fan_out(ctx, event, categories, mail_on=mail_on, deadline=deadline,
                               report=report)
        except sa.exc.DBAPIError as error:
            if not error.connection_invalidated:
                _failed(report, event_id, record_failure(session, me, event_id, error))
                continue
            # The database connection went away (a restart, a failover): not this
            # event's fault. Hand every claim back, burning no attempt, and end the run;
            # the next one resumes from the saved cursor.
            log.warning("wikinotify: lost the database during event %s: %s", event_id, error)
            session.rollback()
            release_events(session, me, None)
            report.interrupted = True
            break
        except Exception as error:  # one bad event never stops the batch
            _failed(report, event_id, record_failure(session, me, event_id, error))
            continue
        if finished and event.ranges:
            report.split += 1
        elif finished:
            report.finished += 1
        else:
            report.deferred += 1
            release_events(session, me, event_id)
            break
    return report


def _failed(report: DispatchReport, event_id: int, dead: bool) -> None:
    report.failed += 1
    report.failed_ids.append(event_id)
    if dead:
        report.dead_ids.append(event_id)


def fan_out(
    ctx: FanoutContext,
    event: Event,
    categories: Sequence[Category],
    *,
    mail_on: bool,
    deadline: float,
    report: DispatchReport | None = None,
) -> bool:
    """Fan ``event`` out through ``categories`` (highest priority first). Returns ``False``
    when the deadline came first and the rest was left for the next run. The entries it
    writes are counted in ``report``, if one is given."""
    session = ctx.session
    if _is_false_deletion(ctx.host, event):
        log.info("wikinotify: page %s still exists; dropping its delete event", event.page_id)
        _finish(session, event)
        return True
    run = start(ctx, event, mail_on)
    try:
        return _fan_out(ctx, run, event, categories, deadline)
    finally:
        if report is not None:
            report.written += run.committed


def _fan_out(ctx: FanoutContext, run: EventRun, event: Event,
             categories: Sequence[Category], deadline: float) -> bool:
    session = ctx.session
    # Site-wide webhooks hear of the event once, committed once the first batch is (a
    # resumed run asks again, and adds none: one delivery per endpoint and event).
    run.site_wide_waiting = bool(routing.add_site_wide(
        session, ctx.host, event, categories,
        lambda category: Notification(**entry_rows(run, category, [])[0])))
    cursor = event.cursor or {}
    keys = [c.key for c in categories]
    resume_at = keys.index(cursor["category"]) if cursor.get("category") in keys else 0
    with BatchWriter(run.app, session) as run.writer:
        for index, category in enumerate(categories):
            last = index == len(categories) - 1
            plan = Walk(
                category,
                after=cursor.get("after") if index == resume_at else None,
                cursor=partial(moved, event, category),
                # Categories before the cursor's wrote their rows in an earlier run; they
                # are walked again without writing, only to know who they already told.
                writing=index >= resume_at,
                remember=not last,
                split=partial(ranges.split, run, category) if last else None,
            )
            outcome = walk(run, plan, deadline=deadline)
            if outcome == "split":
                return True
            if outcome == "deferred":
                _defer(session, event, category, plan.after)
                return False
        settle(run)
        # Marked inside the writer's block: done once its last batch has committed, while
        # the teller may still tell that batch's readers (see BatchWriter.close).
        _finish(session, event)
    return True


def moved(event: Event, category: Category, after: str) -> sa.Update:
    """The statement that stores the event's place past ``after``; none for an event
    already processed (a run whose lease lapsed while another finished the event writes
    entries that change nothing, and must not leave a place the mark cleared,
    :func:`~.claims.mark_processed`)."""
    moved = {"category": category.key, "after": after}
    return (sa.update(Event).where(Event.id == event.id, Event.processed_at.is_(None))
            .values(cursor=moved))


def _finish(session: Session, event: Event) -> None:
    session.execute(mark_processed(event.id))
    session.commit()


def _defer(session: Session, event: Event, category: Category, after: str | None) -> None:
    """Save where this fan-out got to and free the event for the next run
    (docs/rules.md#long-fan-outs)."""
    event.cursor = {"category": category.key, "after": after}
    unclaim(event)
    session.commit()


def _is_false_deletion(host: Host, event: Event) -> bool:
    """A delete event whose page is still there: the delete failed after the emit
    (docs/rules.md#deleting-a-page)."""
    return event.kind == "page:delete" and event.page_id is not None and host.page_exists(
        event.page_id
    )
