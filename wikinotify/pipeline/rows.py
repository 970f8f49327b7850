"""The rows an event's entry makes (docs/rules.md#entries): what every recipient's row shares (the
snapshot, the group key, the variant's count) and what each adds (the channels, when mail is
due)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from .. import preferences
from ..categories import Category
from ..models import ACTORS, EmailState, utcnow
from ..preferences.cadence import email_after_for
from .audience import SCHEDULES, Recipient
from .run import EventRun
from .upsert import COUNTS, Person


def entry_data(run: EventRun, category: Category) -> dict[str, Any]:
    """What the entry shows, whatever happens to the page later (docs/rules.md#entries)."""
    event = run.event
    data = dict(category.snapshot(event))
    data["actor_name"] = run.actor.display_name if run.actor else None
    # Who acted, by id: the coalescing upsert adds each later actor (:data:`ACTORS`).
    data[ACTORS] = ({event.actor_id: run.actor.display_name}
                    if run.actor and event.actor_id else {})
    if event.submission_id is not None:
        data["submission_id"] = event.submission_id
    return data


#: The columns every recipient's row of an entry shares: the keys of what :func:`entry_rows`
#: gives first, in its order (the write's statement is made for them once,
#: :mod:`wikinotify.pipeline.warm`).
SHARED = ("site_id", "category", "variant", "variants", "group_key", "page_id", "comment_id",
          "actor_id", "data", "count", "last_event_id", "email_attempts", "created_at",
          "updated_at")


def entry_rows(
    run: EventRun, category: Category, recipients: Iterable[Recipient]
) -> tuple[dict[str, Any], list[Person]]:
    """The entry this event makes, as ``(what every recipient's row shares, what each
    recipient's row adds)``."""
    event, now = run.event, utcnow()
    variant = category.variant(event)
    shared = {
        "site_id": event.site_id if category.scope == "site" else None,
        "category": category.key,
        "variant": variant,
        "variants": f",{variant},",
        "group_key": category.group_key(event),
        "page_id": event.page_id,
        "comment_id": event.comment_id,
        "actor_id": event.actor_id,
        # Each variant's count travels in the data, so the sentence can say "edited 3
        # times and moved twice"; the coalescing upsert adds to it
        # (docs/rules.md#coalescing-is-idempotency).
        "data": {**entry_data(run, category), COUNTS: {variant: 1}},
        "count": 1,
        "last_event_id": event.id,
        "email_attempts": 0,
        "created_at": now,
        "updated_at": now,
    }
    recipients = list(recipients)
    mailed = [r.facts.id for r in recipients if r.channels.email]
    # A digest may hold this category back: the batch's schedules, one query
    # (docs/rules.md#digests).
    chosen = (run.among(SCHEDULES, mailed, partial(preferences.schedules, run.session))
              if category.digest else {})
    site_timezone = _site_timezone(run) if chosen else None
    # A reader with no stored schedule is immediate: the same time for all of them.
    soon = email_after_for(None, now, run.instance_settings, category)
    people: list[Person] = [
        (
            r.facts.id,
            r.channels.in_app,
            EmailState.PENDING if r.channels.email else EmailState.NONE,
            None if not r.channels.email
            else soon if (schedule := chosen.get(r.facts.id)) is None
            else email_after_for(r.facts, now, run.instance_settings, category,
                                 schedule, site_timezone),
        )
        for r in recipients
    ]
    return shared, people


def _site_timezone(run: EventRun) -> str | None:
    """The event's site's zone, asked of the host once per event run."""
    if run.site_timezone is None:
        site = run.host.site(run.event.site_id) if run.event.site_id is not None else None
        # "" stands for "asked; the site names no zone", so the host is asked once.
        run.site_timezone = (site.timezone if site is not None else None) or ""
    return run.site_timezone or None
