"""One loop for the fan-out of an event and of a range of a split event (:func:`walk`): a
category's candidates, a keyset batch at a time, each decided (:mod:`.audience`) and handed
to the batch writer with the statement that moves the run's place past it (:func:`write`),
until the candidates end, the walk reaches its bound, the deadline comes, or the event is
split into ranges."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import sqlalchemy as sa
from flask import Flask
from sqlalchemy.orm import Session

from ..categories import Category
from ..inbox import live
from ..outbound import routing
from . import audience
from .audience import Recipient
from .batch_writer import Tell
from .rows import entry_rows
from .run import EventRun, settle
from .upsert import Person, upsert

#: How a walk ended: its candidates (or its bound) reached, out of time with its place
#: kept in :attr:`Walk.after`, or the event split into ranges.
Outcome = Literal["done", "deferred", "split"]


def _whole(candidates: list[str]) -> tuple[list[str], bool]:
    return candidates, False


@dataclass
class Walk:
    """One category's walk through its candidates, for an event or a range of one."""

    category: Category
    #: The place: the last candidate walked past (``None``: from the start), moved as the
    #: walk goes.
    after: str | None
    #: The statement that stores the place past a batch's last candidate.
    cursor: Callable[[str], sa.Update]
    #: ``False`` for an event's category that wrote its rows in an earlier run: it is walked
    #: again without writing, only to know who it already told.
    writing: bool = True
    #: Keep who is told in ``run.taken``, for the lower-priority categories that follow.
    remember: bool = False
    #: The part of a batch inside the walk, and whether the walk ends in it.
    within: Callable[[list[str]], tuple[list[str], bool]] = _whole
    #: Asked at the first batch: ``None`` if the rest went to ranges (an event's last
    #: category), else the candidates that follow it which it read to find out.
    split: Callable[[list[str]], list[str] | None] | None = None


def walk(run: EventRun, plan: Walk, *, deadline: float) -> Outcome:
    """Walk ``plan``'s category from its place, within ``deadline`` (``time.monotonic``)."""
    category = plan.category
    ahead: list[str] = []  # candidates read past the place already (by the split's check)
    first = True
    while True:
        # Out of time: keep the place and hand over, but only after this run has moved
        # its work on by a batch, so every run makes progress.
        if plan.writing and run.batches and time.monotonic() >= deadline:
            settle(run)
            return "deferred"
        if ahead:
            # In batches of the first's size: the split's check read them in a multiple of it.
            full = audience.CANDIDATE_BATCH
            candidates, ahead = ahead[:full], ahead[full:]
        else:
            full = audience.batch_size(first)
            candidates = audience.next_candidates(run.ctx, category, run.event, plan.after,
                                                  full)
        more = first and len(candidates) == full
        if more and plan.writing and run.writer is not None:
            run.writer.expect()  # a batch follows this one: the writer gets ready meanwhile
        first = False
        batch, ends = plan.within(candidates)
        if not batch:
            return "done"
        if plan.split is not None and plan.after is None:
            if run.written:
                settle(run)  # the split stores the cursor: the writes first
            found = plan.split(batch)
            if found is None:
                return "split"
            ahead = found
        if more:
            # More batches follow, and the event was not split (its ranges read for
            # themselves): what each batch would read again of wikinotify's tables is read
            # once for the run (an event of one batch, nearly all, reads per batch).
            audience.read_for_run(run, category)
        chosen = [r for r in audience.decide(run, category, batch) if r.facts.id not in run.taken]
        if plan.remember:
            run.taken.update(r.facts.id for r in chosen)
        plan.after = batch[-1]
        last = ends or len(candidates) < full
        if plan.writing:
            if chosen:
                # The cursor moves in the same transaction as the rows it covers: a run
                # that dies or fails after this commit resumes past them, so no written
                # batch is ever replayed (a replay coalesced into an entry that a later
                # event has since touched would count twice,
                # docs/rules.md#coalescing-is-idempotency).
                write(run, category, chosen, plan.cursor(plan.after), alone=last)
            run.batches += 1
        if last:
            return "done"


def write(
    run: EventRun,
    category: Category,
    chosen: list[Recipient],
    cursor: sa.Update,
    *,
    alone: bool,
) -> None:
    """Have ``chosen``'s entries written and committed with ``cursor``, the statement
    that moves the run's place past them, then their open pages told; ``alone`` when no
    batch of the category follows (see :meth:`~.batch_writer.BatchWriter.write`).

    Everything the write needs is read here, in the run's thread and session: the writer
    gets plain values (:mod:`wikinotify.pipeline.batch_writer`)."""
    assert run.writer is not None, "a run writes inside its BatchWriter"
    event = run.event
    shared, people = entry_rows(run, category, chosen)
    run.writer.write(partial(
        _write_batch,
        run.app,
        shared,
        people,
        (event.id, category.key, category.group_key(event), audience.targets(chosen)),
        cursor,
        [r.facts.id for r in chosen if r.channels.in_app],
        partial(_committed, run, len(chosen)),
    ), alone=alone)
    if run.site_wide_waiting:
        # Nothing leaves the wiki for an event whose first batch failed: its site-wide
        # deliveries commit after that batch (once per event, so one wait).
        run.writer.flush()
        run.site_wide_waiting = False
    # The run's own reads end here, as its transaction would with the batch's commit.
    run.session.commit()
    run.written += len(chosen)


def _write_batch(
    app: Flask,
    shared: dict[str, Any],
    people: list[Person],
    deliveries: tuple[int, str, str, dict[str, tuple[int, ...]]],
    cursor: sa.Update,
    told: list[str],
    committed: Callable[[], None],
    session: Session,
) -> Tell:
    """One batch's transaction: the entries, their deliveries and the cursor; then, what
    the writer has follow the commit: the open pages of those told in the inbox."""
    upsert(session, shared, people)
    routing.add_deliveries(session, *deliveries)
    session.execute(cursor)
    session.commit()
    committed()
    return partial(live.changed, app, told)


def _committed(run: EventRun, entries: int) -> None:
    # Counted by whichever thread committed them (the writer's, on PostgreSQL), one batch
    # at a time: what a run reports is what it committed, never a batch that failed.
    run.committed += entries
