"""Split fan-outs: one event, many workers (docs/rules.md#long-fan-outs).

An event whose last category has more candidates than ``WIKINOTIFY_FANOUT_RANGE_SIZE`` is
split when another worker listens on the queue: the run that finds it out walks that
category's ids ahead (ids only, keyset) and cuts them into ranges, each a row of
``wikinotify_fanout_ranges`` that a ``fanout_range`` job claims, resumes from its own cursor
and retries on its own, so several workers fan one large audience out at once; the last
range to finish marks the event processed. See :func:`split` for what is split and why.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.orm import Session

from .. import queue
from ..categories import Category, FanoutContext, Registry
from ..config import config
from ..models import Event, FanoutRange, utcnow
from . import audience
from .batch_writer import BatchWriter
from .claims import mark_processed, release_range, unclaim
from .failures import range_failed
from .run import EventRun, settle, start
from .walk import Walk, walk

log = logging.getLogger(__name__)

def split(run: EventRun, category: Category, first: list[str]) -> list[str] | None:
    """Split the fan-out of ``category``, the event's last, into ranges of
    ``WIKINOTIFY_FANOUT_RANGE_SIZE`` candidates and hand them to ``fanout_range`` jobs, when
    it has more than one range's worth (``None``); else change nothing and return the
    candidates it read after ``first`` to learn that (:func:`_range_bounds`), for the walk
    to take rather than read again.

    Asked at the category's first batch, and only when that batch is full or already
    larger than a range: an event with fewer candidates pays nothing, and runs as before.

    Only the last category is split. The ones before it (a comment's mentions and reply,
    ahead of the page's watchers) were written by this run, and who they told is stored
    with the event, so every range skips those people: one entry per person per event,
    the highest priority's (docs/rules.md#one-entry-per-person-per-event), however the ranges fall.
    A range is a stretch of that one category's keyset, bounded by ids the category itself returned,
    so no order of ids needs to hold across categories (the wiki owes none: the demo's watchers come
    in integer order, the opted-in preferences in text order), and no host lookup changes.
    An event whose earlier categories told more than a range's worth is not split.

    Nor is an event whose run is the job of the only worker listening on the queue (unless
    ``WIKINOTIFY_FANOUT_SPLIT_ALONE``): it would take the ranges one after another itself,
    and each would cost it what the split costs, the walk of the audience's ids before the
    first write and a pause in writing at each range's start (docs/benchmarks.md#the-fan-out).
    Workers on other machines listen on the same queue in the same Redis, so they are
    counted too. A run that is no RQ job (called in-process) cannot know who takes the
    ranges, and splits.
    """
    size = config("FANOUT_RANGE_SIZE")
    if not size or len(first) < min(size + 1, audience.CANDIDATE_BATCH) or len(run.taken) > size:
        return []
    if _alone():
        return []
    uppers, ahead = _range_bounds(run, category, first, size)
    if not uppers:
        return ahead
    event, session = run.event, run.session
    lowers = [None, *uppers]
    session.add_all(
        FanoutRange(event_id=event.id, number=number, lower=lower, upper=upper)
        for number, (lower, upper) in enumerate(zip(lowers, [*uppers, None], strict=True))
    )
    event.ranges = len(lowers)
    event.cursor = {"category": category.key, "taken": sorted(run.taken)}
    unclaim(event)
    session.commit()
    log.info("wikinotify: event %s split into %s ranges of %s", event.id, len(lowers), size)
    queue.kick(current_app, queue.Job.FANOUT_RANGE, worker=True)
    return None


def _alone() -> bool:
    """Whether this run's worker is the only one listening on the fan-out queue (and a lone
    worker does not split, ``WIKINOTIFY_FANOUT_SPLIT_ALONE``)."""
    if config("FANOUT_SPLIT_ALONE"):
        return False
    if queue.other_workers(current_app) != 0:
        return False
    log.info("wikinotify: event not split: no other worker listens on the fan-out queue")
    return True


#: The bounds are found by reading ids this many batches at a time: an audience of a
#: range or less (read whole before its first write, to learn that it is not split) costs
#: a query per 50,000 ids rather than per 5,000, ids only, never more than that held.
BOUND_BATCHES = 10


def _range_bounds(run: EventRun, category: Category, first: list[str],
                  size: int) -> tuple[list[str], list[str]]:
    """The last id of each range of ``size`` candidates but the last range, walking the
    category's ids ahead from its first batch ``first``: ids only (no facts, access or
    writes), a keyset query per :data:`BOUND_BATCHES` candidate batches, holding only the
    bounds; and the ids of the first of those queries, the candidates that follow
    ``first``, which an event that is not split walks next (at most :data:`BOUND_BATCHES`
    batches of ids held: an audience of 55,000 is then read once, not twice)."""
    uppers: list[str] = []
    ahead: list[str] = []
    count, batch, full = 0, first, audience.CANDIDATE_BATCH
    while batch:
        for candidate in batch:
            count += 1
            if count == size:
                uppers.append(candidate)
                count = 0
        if len(batch) < full:
            break
        full = audience.CANDIDATE_BATCH * BOUND_BATCHES
        batch = audience.next_candidates(run.ctx, category, run.event, batch[-1], full)
        ahead = ahead or batch
    if uppers and count == 0:
        uppers.pop()  # nobody after the last bound: no empty last range
    return uppers, ahead


@dataclass
class RangeReport:
    range_id: int
    event_id: int | None = None
    written: int = 0
    #: The range was done, and it was its event's last, which it marked processed.
    done: bool = False
    processed: bool = False
    deferred: bool = False
    failed: bool = False
    #: The failure made the range's event a dead letter.
    dead: bool = False
    interrupted: bool = False
    started_at: datetime = field(default_factory=utcnow)


def fan_out_range(
    ctx: FanoutContext,
    registry: Registry,
    range_id: int,
    *,
    mail_on: bool,
    budget: float,
    me: str,
) -> RangeReport:
    """Fan out the range ``range_id``, claimed by ``me`` (:func:`~.claims.claim_range`), within
    ``budget`` seconds; a failure is counted on the range as on an event (back-off, then a
    dead letter, which makes its event one)."""
    session = ctx.session
    report = RangeReport(range_id=range_id)
    try:
        piece = session.get_one(FanoutRange, range_id)
        report.event_id = piece.event_id
        event = session.get_one(Event, piece.event_id)
        _fan_out_range(ctx, registry, event, piece, report, mail_on=mail_on,
                       deadline=time.monotonic() + budget)
    except sa.exc.DBAPIError as error:
        if not error.connection_invalidated:
            report.dead = range_failed(session, me, range_id, error)
            report.failed = True
            return report
        # Not the range's fault (see dispatch): hand it back, burning no attempt.
        log.warning("wikinotify: lost the database during range %s: %s", range_id, error)
        session.rollback()
        release_range(session, me, range_id)
        report.interrupted = True
    except Exception as error:  # the other ranges go on; this one backs off
        report.dead = range_failed(session, me, range_id, error)
        report.failed = True
    return report


def _fan_out_range(
    ctx: FanoutContext,
    registry: Registry,
    event: Event,
    piece: FanoutRange,
    report: RangeReport,
    *,
    mail_on: bool,
    deadline: float,
) -> None:
    session = ctx.session
    split_at = event.cursor or {}
    # A category switched off since the split (WIKINOTIFY_CATEGORIES) tells nobody more.
    category = registry.get(split_at.get("category", ""))
    run = start(ctx, event, mail_on)
    run.taken = set(split_at.get("taken") or ())
    # The later ranges' bounds: a range whose own upper bound has left the category since
    # the split (an unwatch) stops at the next one, instead of walking on to the end.
    bounds = sa.select(FanoutRange.upper).where(
        FanoutRange.event_id == piece.event_id, FanoutRange.number > piece.number
    )
    later = {upper for upper in session.scalars(bounds) if upper is not None}
    # Read once: each batch's commit expires the range's row, and reading an attribute of
    # it in the next batch would load the row again (a query a batch).
    range_id, upper = piece.id, piece.upper
    try:
        with BatchWriter(run.app, session) as run.writer:
            if category is not None:
                plan = Walk(
                    category,
                    after=piece.cursor or piece.lower,
                    # Committed with the rows it covers, as an event's cursor is.
                    cursor=lambda after: sa.update(FanoutRange)
                    .where(FanoutRange.id == range_id).values(cursor=after),
                    within=lambda candidates: _within(candidates, upper, later),
                )
                if walk(run, plan, deadline=deadline) == "deferred":
                    piece.cursor = plan.after
                    unclaim(piece)
                    session.commit()
                    report.deferred = True
                    return
            settle(run)
            # Inside the writer's block, as an event's mark (see BatchWriter.close).
            report.done = True
            report.processed = _finish_range(session, piece)
    finally:
        # A range that fails after some batches committed (each with its cursor, so
        # never written again) has still written them.
        report.written = run.committed


def _within(candidates: list[str], upper: str | None, later: set[str]) -> tuple[list[str], bool]:
    """The part of a batch inside the range, and whether the range ends in it: at its
    upper bound (included), or, if that has left the category, at a later range's bound
    (excluded; what lies between is the next range's too, and an entry written twice for
    one event is written once, docs/rules.md#coalescing-is-idempotency)."""
    if upper is None:
        return candidates, False
    for index, candidate in enumerate(candidates):
        if candidate == upper:
            return candidates[: index + 1], True
        if candidate in later:
            return candidates[:index], True
    return candidates, False


def _finish_range(session: Session, piece: FanoutRange) -> bool:
    """Mark ``piece`` done; if it was its event's last, mark the event processed and
    delete its ranges, in the same transaction. Returns whether it was the last.

    The event's row is locked first (PostgreSQL), so the finishers of its last two ranges
    queue there, and the second sees the first's range done: exactly one of them finds
    none left. SQLite has one writer at a time, which the UPDATE of the range makes this
    transaction before it counts."""
    event_id = piece.event_id
    session.execute(sa.select(Event.id).where(Event.id == event_id).with_for_update())
    piece.done_at = utcnow()
    unclaim(piece)
    session.flush()
    left = session.scalar(
        sa.select(sa.func.count()).select_from(FanoutRange).where(
            FanoutRange.event_id == event_id, FanoutRange.done_at.is_(None)
        )
    )
    if not left:
        session.execute(mark_processed(event_id))
        session.execute(sa.delete(FanoutRange).where(FanoutRange.event_id == event_id))
    session.commit()
    return not left
