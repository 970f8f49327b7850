"""What one event's fan-out keeps while it runs (:class:`EventRun`), how a run starts, and
how it settles its writes before it moves the event on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flask import Flask, current_app
from sqlalchemy.orm import Session

from ..categories import FanoutContext
from ..host import Host, UserFacts
from ..instance_settings import instance_settings
from ..models import Event, InstanceSettings
from .batch_writer import BatchWriter

T = TypeVar("T")


@dataclass
class EventRun:
    """What one event's fan-out keeps while it runs: bounded by the batch size, except
    ``taken``, which holds only recipients of higher-priority categories when a lower one
    follows (a handful for a comment, the captured watchers for a deletion)."""

    event: Event
    ctx: FanoutContext
    #: The app itself (not the proxy): the batch writer's thread works in it.
    app: Flask
    instance_settings: InstanceSettings
    mail_on: bool
    actor: UserFacts | None
    page: dict[str, Any]
    access: dict[tuple[frozenset[str], str], bool] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    #: The site's zone for readers who name none: None until asked, "" if it has none.
    site_timezone: str | None = None
    #: Who writes the batches (:mod:`wikinotify.pipeline.batch_writer`); set while the run writes.
    writer: BatchWriter | None = None
    #: The event's site-wide deliveries wait in the run's own transaction, which commits
    #: them only after the first batch has committed (see :func:`~wikinotify.pipeline.walk.write`).
    site_wide_waiting: bool = False
    #: Entries handed to the writer; :attr:`committed`, those whose batch committed.
    written: int = 0
    committed: int = 0
    batches: int = 0
    #: What a run of more than one batch read once of wikinotify's own tables, each
    #: reader's rows by her id (:func:`~wikinotify.pipeline.audience.read_for_run`), under
    #: the read's name; ``None`` where the rows were more than its cap, and so are read
    #: per batch. At most a batch's worth of rows each.
    kept: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def among(
        self, name: str, user_ids: Sequence[str], read: Callable[[Sequence[str]], dict[str, T]]
    ) -> dict[str, T]:
        """``read(user_ids)``, the batch's read of its readers' rows: answered from those
        the run read once under ``name`` (:attr:`kept`) when it did."""
        if (rows := self.kept.get(name)) is None:
            return read(user_ids)
        if len(rows) < len(user_ids):
            wanted = set(user_ids)
            return {user_id: row for user_id, row in rows.items() if user_id in wanted}
        return {user_id: rows[user_id] for user_id in user_ids if user_id in rows}

    @property
    def host(self) -> Host:
        return self.ctx.host

    @property
    def session(self) -> Session:
        return self.ctx.session


def start(ctx: FanoutContext, event: Event, mail_on: bool) -> EventRun:
    host = ctx.host
    actor = host.users([event.actor_id]).get(event.actor_id) if event.actor_id else None
    page = {
        **(event.data.get("snapshot") or {}),
        "id": event.page_id,
        "site_id": event.site_id,
    }
    # The run's settings as they were when it started, set apart from the session: its
    # commit after every batch would expire them, and each batch would read them again.
    settings = instance_settings(ctx.session)
    ctx.session.expunge(settings)
    return EventRun(
        event=event,
        ctx=ctx,
        # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
        app=current_app._get_current_object(),  # type: ignore[attr-defined]
        instance_settings=settings,
        mail_on=mail_on,
        actor=actor,
        page=page,
    )


def settle(run: EventRun) -> None:
    """Wait until the batches handed to the writer are committed, then end the run's own
    transaction: what it read of the event (or the range) is read again, the cursor the
    writer has moved since included (setting an attribute to the value the session last
    read would write nothing), and in a snapshot taken after the writer's commits."""
    assert run.writer is not None, "a run writes inside its BatchWriter"
    run.writer.flush()
    run.site_wide_waiting = False  # the commit below takes them, after every batch
    run.session.commit()
