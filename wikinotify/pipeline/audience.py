"""Who is told of an event (docs/rules.md#access–docs/rules.md#one-entry-per-person-per-event): the
candidates a category names, a keyset batch at a time, and of them who may see the page, who wants
it, and on which channels."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from .. import dialects, preferences
from ..categories import Category, Channels, FanoutContext
from ..host import UserFacts
from ..models import EndpointKind, Event, Preference
from ..outbound import routing
from ..preferences import mutes
from .run import EventRun

#: Candidates read per keyset batch (docs/rules.md#candidates-in-batches), each batch one
#: transaction: the first batch of a walk; the ones after it are :data:`BATCH_GROWTH` times
#: larger (:func:`batch_size`). Larger batches pay the per-batch round trips and commit less
#: often; memory grows with the batch, not the audience (``python -m bench.fanout`` measures
#: both).
CANDIDATE_BATCH = 5000
#: A walk's batches after its first are this many times :data:`CANDIDATE_BATCH`: the first
#: is written while nothing else is (the batch writer starts with it), and an audience of a
#: batch or two (most events) is read and written as before; a large one pays each
#: batch's fixed costs (a dozen statements, a commit, the event read again) half as often.
#: A 1,000,000-watcher fan-out spent about 1 CPU-second less in the worker and 1.5 less in
#: PostgreSQL with batches of 10,000 (docs/benchmarks.md#the-fan-out).
BATCH_GROWTH = 2


#: The names a run keeps what it read once under (:attr:`EventRun.kept`): who muted the
#: event's page or actor, and every stored email schedule; a category's stored preferences
#: and the endpoints that take it are kept under ``"<name>:<category key>"``.
MUTERS, PREFERENCES, ENDPOINTS, SCHEDULES = "muters", "preferences", "endpoints", "schedules"


def batch_size(first: bool) -> int:
    """Candidates a walk reads in its first batch (``first``), and in each one after it."""
    return CANDIDATE_BATCH if first else CANDIDATE_BATCH * BATCH_GROWTH


@dataclass
class Recipient:
    facts: UserFacts
    channels: Channels
    #: The reader's endpoints (webhook, chat, push) that get a delivery of this entry.
    endpoints: tuple[int, ...] = ()


def _may_see(run: EventRun, category: Category, facts: UserFacts) -> bool:
    """Access at the time of the fan-out, once per distinct group set and permission
    (docs/rules.md#access)."""
    for permission in category.access_checks:
        key = (facts.group_ids, permission)
        if key not in run.access:
            run.access[key] = run.host.check_access(facts.group_ids, permission, run.page)
        if not run.access[key]:
            return False
    return True


def stored_preferences(
    session: Session, category: Category, user_ids: Sequence[str]
) -> dict[str, dict[str, bool]]:
    """The stored rows of this batch, user → channel → enabled, one query."""
    return _by_user(session.execute(
        _STORED.where(Preference.category == category.key,
                      dialects.among(session, Preference.user_id, user_ids))))


def category_preferences(
    session: Session, category: Category, limit: int
) -> dict[str, dict[str, bool]] | None:
    """Every stored row of ``category``, as :func:`stored_preferences` would find them
    batch by batch; ``None`` when there are more than ``limit``
    (``ix_wikinotify_preferences_category``)."""
    rows = dialects.at_most(session, _STORED.where(Preference.category == category.key), limit)
    return None if rows is None else _by_user(rows)


_STORED = sa.select(Preference.user_id, Preference.channel, Preference.enabled)


def _by_user(rows: Iterable[Any]) -> dict[str, dict[str, bool]]:
    stored: dict[str, dict[str, bool]] = {}
    for user_id, channel, enabled in rows:
        stored.setdefault(user_id, {})[channel] = enabled
    return stored


def read_for_run(run: EventRun, category: Category) -> None:
    """Read once for the run, as a walk of ``category`` that will take more than one batch
    begins, the rows of wikinotify's tables its batches would each read again: who muted
    the page or the actor, the category's stored preferences, the active endpoints, and
    for a category a digest may hold back, the email schedules. Each read stops at a
    batch's worth of rows (:data:`CANDIDATE_BATCH`): the run keeps no more than a batch
    does, and a read of as many rows as one batch's read finds costs about as much, where
    a walk of two batches or more makes that read twice or more. Past it, that table is
    read per batch for this run, as for an event of one batch. Each module's read and its
    batch read share the rule that turns rows into answers
    (docs/rules.md#candidates-in-batches)."""
    cap, session, event, kept = CANDIDATE_BATCH, run.session, run.event, run.kept
    if MUTERS not in kept:
        found = mutes.muters(session, event.page_id, event.actor_id, cap)
        kept[MUTERS] = None if found is None else dict.fromkeys(found, True)
    if (name := f"{PREFERENCES}:{category.key}") not in kept:
        kept[name] = category_preferences(session, category, cap)
    if (name := f"{ENDPOINTS}:{category.key}") not in kept:
        kept[name] = routing.every_endpoint(session, category.key, cap)
    if category.digest and SCHEDULES not in kept:
        kept[SCHEDULES] = preferences.every_schedule(session, cap)


def decide(run: EventRun, category: Category, candidates: Sequence[str]) -> list[Recipient]:
    """Of ``candidates``, who is told through ``category``, and on which channels.

    Runs once per candidate of every fan-out, so the per-candidate work is kept to
    dictionary lookups: access once per group set, and the channels of a reader who
    stored nothing and has no endpoint (nearly everyone) straight from the defaults."""
    # The event's columns read once: each read of an ORM attribute is a Python call, and
    # the comparison below runs per candidate.
    actor_id, page_id = run.event.actor_id, run.event.page_id
    candidates = [c for c in dict.fromkeys(candidates) if c != actor_id]
    if not candidates:
        return []
    # Who muted this page or this actor hears nothing of it, from any category.
    muted = run.among(MUTERS, candidates, lambda ids: dict.fromkeys(
        mutes.muters_among(run.session, ids, page_id, actor_id), True))
    facts = run.host.users([c for c in candidates if c not in muted] if muted else candidates)
    # Access is a matter of the group set: asked once per set in this batch (and once per
    # set and permission in the run, by _may_see), not once per reader.
    seen: dict[frozenset[str], bool] = {}
    eligible: list[UserFacts] = []
    for c in candidates:
        if (person := facts.get(c)) is None or c in muted or not person.can_receive:
            continue
        allowed = seen.get(person.group_ids)
        if allowed is None:
            allowed = seen[person.group_ids] = _may_see(run, category, person)
        if allowed:
            eligible.append(person)
    ids = [person.id for person in eligible]
    stored = run.among(f"{PREFERENCES}:{category.key}", ids,
                       lambda ids: stored_preferences(run.session, category, ids))
    # Webhook, chat and push: on where the reader has an active endpoint taking the category
    # and has not turned the channel off; one query for the batch's endpoints.
    routes = run.among(f"{ENDPOINTS}:{category.key}", ids,
                       lambda ids: routing.endpoints_of(run.session, ids, category.key))
    # The one rule (preferences.effective), asked once for those who stored nothing.
    required = category.in_app_required(run.event)
    defaults = preferences.effective(category, {}, mail_on=run.mail_on, required=required)
    # The few distinct channel sets, each made once.
    made: dict[tuple[bool, bool, bool, bool, bool], Channels] = {}
    chosen: list[Recipient] = []
    for person in eligible:
        rows = stored.get(person.id)
        wants = (preferences.effective(category, rows, mail_on=run.mail_on, required=required)
                 if rows else defaults)
        in_app, email = wants.in_app, wants.email and person.can_receive_email
        webhook = chat = push = False
        endpoints: tuple[int, ...] = ()
        if (mine := routes.get(person.id)) is not None:
            wanted = {kind: bool(getattr(wants, kind)) for kind in mine}
            endpoints = tuple(e for kind, found in mine.items() if wanted[kind] for e in found)
            webhook = bool(wanted.get(EndpointKind.WEBHOOK))
            chat = bool(wanted.get(EndpointKind.CHAT))
            push = bool(wanted.get(EndpointKind.PUSH))
        if in_app or email or endpoints:
            key = (in_app, email, webhook, chat, push)
            channels = made.get(key) or made.setdefault(key, Channels(*key))
            chosen.append(Recipient(person, channels, endpoints))
    return chosen


def targets(chosen: Sequence[Recipient]) -> dict[str, tuple[int, ...]]:
    """Reader → her endpoints that get this entry (webhook, chat)."""
    return {r.facts.id: r.endpoints for r in chosen if r.endpoints}


def next_candidates(
    ctx: FanoutContext, category: Category, event: Event, after: str | None,
    limit: int | None = None,
) -> list[str]:
    """A batch of ``category``'s candidates (``limit``, else :data:`CANDIDATE_BATCH`). A host
    method it needs that the wiki has not implemented fails the event naming the category,
    as Admin → Notifications shows."""
    try:
        return category.recipients(ctx, event, after, limit or CANDIDATE_BATCH)
    except NotImplementedError as error:
        raise NotImplementedError(f"notification category {category.key!r}: {error}") from error
