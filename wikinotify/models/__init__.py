"""wikinotify's tables, all prefixed ``wikinotify_``.

They live on their own ``MetaData`` (the wiki has its own), and are used through the wiki's
Flask-SQLAlchemy session, so an ``emit`` joins the caller's transaction. The wiki's tables
are never referenced by foreign key: wikinotify cannot know their names, so ids from the
wiki are stored as text and a deleted account is forgotten through
:func:`wikinotify.accounts.forget_user`.

Partial indexes (:func:`partial_index`) carry both ``postgresql_where`` and
``sqlite_where``, so both databases get the same ones (docs/rules.md#entries).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# The vocabulary, re-exported: a reader of the tables finds their values here.
from .vocabulary import DELIVERY_NOT_SENT as DELIVERY_NOT_SENT
from .vocabulary import MAIL_NOT_SENT as MAIL_NOT_SENT
from .vocabulary import Cadence as Cadence
from .vocabulary import Channel as Channel
from .vocabulary import DeliveryState as DeliveryState
from .vocabulary import EmailState as EmailState
from .vocabulary import EndpointKind as EndpointKind
from .vocabulary import EndpointState as EndpointState
from .vocabulary import ErrorClass as ErrorClass
from .vocabulary import MuteKind as MuteKind
from .vocabulary import Origin as Origin
from .vocabulary import SkipReason as SkipReason
from .vocabulary import sql_in as sql_in

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: Ids that come from the wiki (users, sites, pages, comments, submissions).
HostId = sa.String(64)

#: Our own row ids: 64-bit on PostgreSQL; SQLite only autoincrements an INTEGER key.
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: JSONB on PostgreSQL, so a coalescing upsert can merge snapshots in SQL
#: (docs/rules.md#coalescing-is-idempotency).
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so values are stored as
    naive UTC and given their zone back on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("wikinotify stores aware datetimes only; use datetime.now(UTC)")
        if value is not None and dialect.name == "sqlite":
            return value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(
        self, value: datetime | None, dialect: Dialect
    ) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def partial_index(name: str, *columns: str, where: str, unique: bool = False,
                  **options: Any) -> sa.Index:
    """An index of the rows matching ``where``, declared for both databases
    (docs/rules.md#entries); ``options``: the dialects' own (``postgresql_include``)."""
    return sa.Index(name, *columns, unique=unique, postgresql_where=sa.text(where),
                    sqlite_where=sa.text(where), **options)


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    # Each model maps one Table (DeclarativeBase allows any FromClause, a join for one).
    __table__: ClassVar[sa.Table]


class Event(Base):
    """The outbox (docs/rules.md#the-outbox): one row per emitted event, drained by the dispatch
    job."""

    __tablename__ = "wikinotify_events"

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(64))
    origin: Mapped[str] = mapped_column(sa.String(16))
    site_id: Mapped[str | None] = mapped_column(HostId)
    actor_id: Mapped[str | None] = mapped_column(HostId)
    page_id: Mapped[str | None] = mapped_column(HostId)
    comment_id: Mapped[str | None] = mapped_column(HostId)
    submission_id: Mapped[str | None] = mapped_column(HostId)
    #: The snapshot, the variant and anything else a category reads.
    data: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    #: Candidates captured when the event was written (the watchers of a deleted page).
    recipients: Mapped[list[str] | None] = mapped_column(Json)
    #: Where an interrupted fan-out stopped (docs/rules.md#long-fan-outs).
    cursor: Mapped[dict[str, Any] | None] = mapped_column(Json)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_by: Mapped[str | None] = mapped_column(sa.String(128))
    processed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: Fan-out attempts that failed; after the last one the event is a dead letter.
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    #: Not claimed again before this: the back-off after a failed attempt.
    retry_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: The last failed attempt's error, for Admin → Notifications.
    error: Mapped[str | None] = mapped_column(sa.Text)
    #: When the event was given up (a dead letter); an administrator may retry it.
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: The host's idempotency key (a revision's or a comment's id): the same key emitted
    #: again for the same kind writes nothing.
    key: Mapped[str | None] = mapped_column(sa.String(255))
    #: How many ranges its fan-out was split into (:class:`FanoutRange`); NULL for a
    #: fan-out one run does. A split event is never claimed itself: its ranges are.
    ranges: Mapped[int | None] = mapped_column(sa.Integer)

    __table_args__ = (
        partial_index(
            "uq_wikinotify_events_kind_key",
            "kind",
            "key",
            unique=True,
            where="key IS NOT NULL",
        ),
        # The claim, and the outbox backlog on Admin → Notifications: what still waits
        # for a fan-out. A dead letter waits for an administrator, not a worker.
        partial_index(
            "ix_wikinotify_events_unprocessed",
            "created_at",
            where="processed_at IS NULL AND failed_at IS NULL",
        ),
        # The dead letters Admin → Notifications lists, latest first.
        partial_index(
            "ix_wikinotify_events_failed",
            "failed_at",
            "id",
            where="failed_at IS NOT NULL",
        ),
        # Retention: processed events older than a day (docs/rules.md#retention).
        partial_index(
            "ix_wikinotify_events_processed",
            "processed_at",
            where="processed_at IS NOT NULL",
        ),
    )


class FanoutRange(Base):
    """One range of a split fan-out (``WIKINOTIFY_FANOUT_RANGE_SIZE``): the candidates of
    the event's last category after ``lower`` up to and including ``upper`` (ids in the
    category's own keyset order; NULL: the start, the end), each claimed, resumed and
    retried on its own by the ``fanout_range`` job. The rows go when the last is done."""

    __tablename__ = "wikinotify_fanout_ranges"

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    event_id: Mapped[int] = mapped_column(
        RowId, sa.ForeignKey("wikinotify_events.id", ondelete="CASCADE")
    )
    number: Mapped[int] = mapped_column(sa.Integer)
    lower: Mapped[str | None] = mapped_column(HostId)
    upper: Mapped[str | None] = mapped_column(HostId)
    #: The last candidate whose entries are written: the range resumes after it.
    cursor: Mapped[str | None] = mapped_column(HostId)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_by: Mapped[str | None] = mapped_column(sa.String(128))
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    retry_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(sa.Text)
    #: When the range was given up: its event is a dead letter until an administrator
    #: retries it.
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.UniqueConstraint("event_id", "number"),
        # The claim: what is left of every split event, in order.
        partial_index(
            "ix_wikinotify_fanout_ranges_open",
            "event_id",
            "number",
            where="done_at IS NULL AND failed_at IS NULL",
        ),
    )


#: The key of an entry's data naming each person whose events it holds, by id
#: ({"7": "Bob Builder"}): the coalescing upsert adds each later actor, so a mail's subject
#: can say "3 edits by Bob Builder and Carol Danvers" (docs/rules.md#what-a-mail-says).
ACTORS = "actors"
#: An entry names at most this many people: past them, a busy page's entry stops growing
#: (its subject then says "and 49+ others").
ACTORS_KEPT = 50


class Notification(Base):
    """The inbox and the email queue (docs/rules.md#entries): one row per (user, unread group
    key)."""

    __tablename__ = "wikinotify_notifications"

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(HostId)
    #: ``None`` for an instance-scoped entry, shown on every site (docs/rules.md#the-site-switch).
    site_id: Mapped[str | None] = mapped_column(HostId)
    category: Mapped[str] = mapped_column(sa.String(64))
    #: The latest variant.
    variant: Mapped[str] = mapped_column(sa.String(32))
    #: Every variant absorbed, as ``,edited,moved,``: a set an upsert can grow in plain
    #: SQL on both databases, so "edited 4 times and moved" can be said
    #: (docs/rules.md#the-launch-categories).
    variants: Mapped[str] = mapped_column(sa.String(255), default="", server_default="")
    group_key: Mapped[str] = mapped_column(sa.String(255))
    page_id: Mapped[str | None] = mapped_column(HostId)
    comment_id: Mapped[str | None] = mapped_column(HostId)
    actor_id: Mapped[str | None] = mapped_column(HostId)
    data: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    count: Mapped[int] = mapped_column(sa.Integer, default=1, server_default="1")
    last_event_id: Mapped[int] = mapped_column(sa.BigInteger)
    in_app: Mapped[bool] = mapped_column(sa.Boolean)
    email_state: Mapped[str] = mapped_column(
        sa.String(16), default=EmailState.NONE, server_default=EmailState.NONE.value
    )
    #: When the email is due; while ``sending``, when the lease lapses.
    email_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: When the mail went out (``sent``) or was given up (``failed``).
    emailed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    email_attempts: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    #: Why the last attempt failed, kept for Admin → Notifications.
    email_error: Mapped[str | None] = mapped_column(sa.Text)
    #: The class of that failure (:class:`ErrorClass`: ``transient``, ``permanent``,
    #: ``configuration``, ``rate_limit``): it decides whether an attempt is burnt.
    email_error_class: Mapped[str | None] = mapped_column(sa.String(16))
    read_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: Bumped on coalescing: the inbox's sort key.
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        # The inbox: keyset on (updated_at, id) within one user.
        sa.Index("ix_wikinotify_notifications_inbox", "user_id", "updated_at", "id"),
        # The badge: an index-only count of unread in-app rows; the list's pinned entries
        # and "what is unread on this page" for mark-read-on-view (mail-only entries too:
        # a view cancels their mail), each a short range by category
        # (docs/benchmarks.md#the-inbox-at-scale). The id and the update time ride along
        # (PostgreSQL's INCLUDE; SQLite's rowid, which ``id`` is, is in every index
        # already): whether a read mark covers an entry, and whether it is unseen, are
        # read from the index too (docs/rules.md#read-marks).
        partial_index(
            "ix_wikinotify_notifications_unread",
            "user_id",
            "category",
            "page_id",
            "site_id",
            "in_app",
            where="read_at IS NULL",
            postgresql_include=["id", "updated_at"],
        ),
        # The mail drain: what is due, and leases that lapsed (a worker died mid-send).
        partial_index(
            "ix_wikinotify_notifications_email_due",
            "email_after",
            where=sql_in("email_state", MAIL_NOT_SENT),
        ),
        # Admin → Notifications: mail sent and failed per hour, and the latest failures.
        partial_index(
            "ix_wikinotify_notifications_emailed",
            "email_state",
            "emailed_at",
            "id",
            where=sql_in("email_state", (EmailState.SENT, EmailState.FAILED)),
        ),
        # No index on time: ids rise with it, so retention and withdrawing an
        # announcement walk the primary key (wikinotify.inbox.retention.written_before).
        # Coalescing and idempotency are this one index (docs/rules.md#coalescing-is-idempotency).
        partial_index(
            "uq_wikinotify_notifications_unread_group",
            "user_id",
            "group_key",
            unique=True,
            where="read_at IS NULL",
        ),
        sa.CheckConstraint(sql_in("email_state", EmailState), name="email_state"),
    )


class NotificationRow(Protocol):
    """What showing or mailing a notification reads of it: a :class:`Notification`, or
    a row of its table, whose columns have the same names. The mail drain's claim
    returns rows: building entities, and the session keeping them, cost it a third."""

    @property
    def id(self) -> int: ...
    @property
    def user_id(self) -> str: ...
    @property
    def site_id(self) -> str | None: ...
    @property
    def category(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def variants(self) -> str: ...
    @property
    def page_id(self) -> str | None: ...
    @property
    def comment_id(self) -> str | None: ...
    @property
    def actor_id(self) -> str | None: ...
    @property
    def last_event_id(self) -> int: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def count(self) -> int: ...
    @property
    def in_app(self) -> bool: ...
    @property
    def read_at(self) -> datetime | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...


class Preference(Base):
    """A user's choice for one (category, channel), stored only where it differs from
    the category's default (docs/rules.md#preferences-are-stored-only-where-they-differ)."""

    __tablename__ = "wikinotify_preferences"

    user_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    category: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(sa.String(16), primary_key=True)
    enabled: Mapped[bool] = mapped_column(sa.Boolean)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    __table_args__ = (
        # "Who opted in to pageCreated?" without scanning anything else
        # (docs/rules.md#preferences-are-stored-only-where-they-differ).
        partial_index(
            "ix_wikinotify_preferences_enabled",
            "category",
            "channel",
            "user_id",
            where="enabled",
        ),
        # A category's stored rows, all channels, on or off: what a fan-out of many batches
        # reads once for its run, stopped at a cap (wikinotify.pipeline.audience.read_for_run).
        sa.Index("ix_wikinotify_preferences_category", "category", "user_id"),
    )


class EmailSchedule(Base):
    """When a user's notification mail goes out; a row only for users who chose one."""

    __tablename__ = "wikinotify_email_schedules"

    user_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    schedule: Mapped[str] = mapped_column(
        sa.String(16), default=Cadence.IMMEDIATE, server_default=Cadence.IMMEDIATE.value
    )
    #: Local hour (0-23) of a daily or weekly digest, in the user's time zone.
    hour: Mapped[int | None] = mapped_column(sa.SmallInteger)
    #: Weekday of a weekly digest, as ``date.weekday()`` counts (0 = Monday).
    weekday: Mapped[int | None] = mapped_column(sa.SmallInteger)
    #: IANA name of the reader's zone; NULL: the account's, then the site's, then UTC.
    timezone: Mapped[str | None] = mapped_column(sa.String(64))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    __table_args__ = (
        sa.CheckConstraint(sql_in("schedule", Cadence), name="schedule"),
        sa.CheckConstraint("hour IS NULL OR hour BETWEEN 0 AND 23", name="hour"),
        sa.CheckConstraint("weekday IS NULL OR weekday BETWEEN 0 AND 6", name="weekday"),
    )


def new_unsubscribe_secret() -> bytes:
    """32 random bytes: signs unsubscribe links, and is never rotated with sessions."""
    return secrets.token_bytes(32)


class InstanceSettings(Base):
    """The one row of instance-wide settings (docs/rules.md#instance-settings)."""

    __tablename__ = "wikinotify_instance_settings"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, default=1)
    retention_days: Mapped[int] = mapped_column(sa.Integer, default=90, server_default="90")
    email_delay_seconds: Mapped[int] = mapped_column(
        sa.Integer, default=180, server_default="180"
    )
    mail_batch_size: Mapped[int] = mapped_column(sa.Integer, default=100, server_default="100")
    #: Never returned by any API, never logged.
    unsubscribe_secret: Mapped[bytes] = mapped_column(sa.LargeBinary(32))
    #: The Web Push VAPID private key (raw, base64url), sealed
    #: (:mod:`wikinotify.outbound.secrets_box`); generated when first needed, unless the
    #: operator gives one (``WIKINOTIFY_VAPID_PRIVATE_KEY``). Never returned, never logged.
    vapid_private_key_encrypted: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    __table_args__ = (
        sa.CheckConstraint("id = 1", name="single_row"),
        sa.CheckConstraint("mail_batch_size BETWEEN 1 AND 1000", name="mail_batch_size"),
        sa.CheckConstraint("retention_days >= 1", name="retention_days"),
        sa.CheckConstraint("email_delay_seconds >= 0", name="email_delay_seconds"),
    )

    def __repr__(self) -> str:
        # Keep the secret out of logs and tracebacks.
        return f"<InstanceSettings retention_days={self.retention_days}>"


class SiteSwitch(Base):
    """The per-site switch (docs/rules.md#the-site-switch). No row means on."""

    __tablename__ = "wikinotify_site_switches"

    site_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    enabled: Mapped[bool] = mapped_column(sa.Boolean, default=True, server_default=sa.true())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class SeenMark(Base):
    """When a user last opened the bell menu or the inbox: the badge counts the entries
    created or updated after it ("seen" is one row per user; "read" stays per entry)."""

    __tablename__ = "wikinotify_seen"

    user_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ReadMark(Base):
    """A reader's "mark all read" not yet written onto her entries (docs/rules.md#read-marks):
    every entry of hers up to ``through_id``, on ``site_id`` or on no site, reads as read at
    ``read_at``. The ``settle_read_marks`` job writes that onto the rows in batches, then
    deletes the mark; at most one per reader (a second one settles the first at once)."""

    __tablename__ = "wikinotify_read_marks"

    user_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    site_id: Mapped[str | None] = mapped_column(HostId)
    #: The largest entry id when she clicked: every id handed out later is above it.
    through_id: Mapped[int] = mapped_column(sa.BigInteger)
    #: The read time it stamps (the undo token names its mark and its rows by it).
    read_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FeedKey(Base):
    """The version of a reader's feed link (docs/rules.md#the-feed): her token carries it,
    and resetting the link writes a new one, so every older token stops working.

    Random rather than a counter: a counter would start again at 1 for an account
    forgotten and made again with the same id, and bring its old links back to life."""

    __tablename__ = "wikinotify_feed_keys"

    user_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    version: Mapped[str] = mapped_column(sa.String(32))
    #: When the link was made, or last reset.
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    def __repr__(self) -> str:
        # The version is half of a credential: keep it out of logs and tracebacks.
        return f"<FeedKey {self.user_id}>"


class Mute(Base):
    """A page, or a person, a user no longer wants to hear about: the fan-out tells her
    nothing about a muted page, nor anything a muted person does."""

    __tablename__ = "wikinotify_mutes"

    user_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(8), primary_key=True)
    #: The page's id, or the person's.
    target_id: Mapped[str] = mapped_column(HostId, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        # Who muted this page, or this person: what a fan-out of many batches reads once for
        # its run, stopped at a cap (wikinotify.pipeline.audience.read_for_run).
        sa.Index("ix_wikinotify_mutes_target", "kind", "target_id", "user_id"),
        sa.CheckConstraint(sql_in("kind", MuteKind), name="kind"),
    )


class Endpoint(Base):
    """Where a webhook or a chat message goes (docs/rules.md#channels).

    Owned by a user (``owner_id``: her own notifications, a channel beside in-app and
    email) or by the site (``owner_id`` NULL: an administrator's site-wide endpoint, told
    of events by category). Secrets are stored encrypted (:mod:`wikinotify.outbound.secrets_box`)
    and never returned by the API after the answer that created them.
    """

    __tablename__ = "wikinotify_endpoints"

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    #: The user whose notifications it carries; NULL for a site-wide endpoint.
    owner_id: Mapped[str | None] = mapped_column(HostId)
    #: The site a site-wide endpoint listens to (NULL: every site).
    site_id: Mapped[str | None] = mapped_column(HostId)
    #: A webhook's URL (shown to its owner); NULL for chat, whose URL holds a token.
    url: Mapped[str | None] = mapped_column(sa.Text)
    #: A chat endpoint's Apprise URL, encrypted.
    target_encrypted: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    #: What the owner is shown of an encrypted target ("tgram://…/1234").
    target_hint: Mapped[str | None] = mapped_column(sa.String(255))
    description: Mapped[str] = mapped_column(sa.String(255), default="", server_default="")
    #: The category keys it is told of.
    categories: Mapped[list[str]] = mapped_column(Json, default=list)
    #: The Standard Webhooks signing secret (``whsec_…``), encrypted.
    secret_encrypted: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    #: The secret before the last rotation, which keeps signing beside the new one until
    #: ``previous_secret_until``.
    previous_secret_encrypted: Mapped[bytes | None] = mapped_column(sa.LargeBinary)
    previous_secret_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: ``unverified`` until the receiver proves it wants the traffic; ``disabled`` by a
    #: 410, by three days of failures, or by its owner.
    state: Mapped[str] = mapped_column(
        sa.String(16), default=EndpointState.UNVERIFIED,
        server_default=EndpointState.UNVERIFIED.value,
    )
    disabled_reason: Mapped[str | None] = mapped_column(sa.Text)
    #: The challenge the verification event carries, until it is echoed.
    challenge: Mapped[str | None] = mapped_column(sa.String(64))
    verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: The first failure since the last success: three days of it disable the endpoint.
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    __table_args__ = (
        # A user's own endpoints (the fan-out asks per batch), and the site-wide ones.
        sa.Index("ix_wikinotify_endpoints_owner", "owner_id", "kind", "state"),
        # The active endpoints of users, which a fan-out of many batches reads once for its
        # run, stopped at a cap past any number of disabled ones
        # (wikinotify.pipeline.audience.read_for_run).
        sa.Index("ix_wikinotify_endpoints_state", "state", "owner_id"),
        sa.CheckConstraint(sql_in("kind", EndpointKind), name="kind"),
        sa.CheckConstraint(sql_in("state", EndpointState), name="state"),
    )

    def __repr__(self) -> str:
        # Keep the secrets and a chat target's token out of logs and tracebacks.
        return f"<Endpoint {self.id} {self.kind} {self.state}>"


class Delivery(Base):
    """One webhook or chat delivery: one row per (event, endpoint), with its own state,
    lease and attempts (docs/rules.md#channels)."""

    __tablename__ = "wikinotify_deliveries"

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    endpoint_id: Mapped[int] = mapped_column(
        RowId, sa.ForeignKey("wikinotify_endpoints.id", ondelete="CASCADE")
    )
    #: The event it announces; NULL for a test or verification delivery.
    event_id: Mapped[int | None] = mapped_column(sa.BigInteger)
    #: The entry it carries (a user's endpoint), re-read at send time.
    notification_id: Mapped[int | None] = mapped_column(sa.BigInteger)
    #: Whose access, account and preference are checked again just before sending.
    user_id: Mapped[str | None] = mapped_column(HostId)
    #: ``webhook-id``: the same on every retry, so a receiver can drop duplicates.
    message_id: Mapped[str] = mapped_column(sa.String(64))
    #: The payload's ``type``: a category key, ``webhook.test`` or ``webhook.verification``.
    type: Mapped[str] = mapped_column(sa.String(64))
    #: What a test or verification delivery carries, and a site-wide delivery's entry.
    payload: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    state: Mapped[str] = mapped_column(
        sa.String(16), default=DeliveryState.PENDING, server_default=DeliveryState.PENDING.value
    )
    #: Counted before each request is made.
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    #: When it is due; while ``sending``, when the lease lapses.
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    response_code: Mapped[int | None] = mapped_column(sa.Integer)
    latency_ms: Mapped[int | None] = mapped_column(sa.Integer)
    #: :class:`ErrorClass`: ``transient``, ``rate_limit``, ``permanent``, ``gone``,
    #: ``blocked``, ``ineligible``.
    error_class: Mapped[str | None] = mapped_column(sa.String(16))
    error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        # One delivery per (event, endpoint): a replayed fan-out adds none.
        partial_index(
            "uq_wikinotify_deliveries_endpoint_event",
            "endpoint_id",
            "event_id",
            unique=True,
            where="event_id IS NOT NULL",
        ),
        # The delivery job: what is due, and leases that lapsed.
        partial_index(
            "ix_wikinotify_deliveries_due",
            "next_attempt_at",
            where=sql_in("state", DELIVERY_NOT_SENT),
        ),
        # GET /api/webhooks/<id>/deliveries, newest first (keyset on id).
        sa.Index("ix_wikinotify_deliveries_endpoint", "endpoint_id", "id"),
        sa.UniqueConstraint("message_id", name="uq_wikinotify_deliveries_message_id"),
        sa.CheckConstraint(sql_in("state", DeliveryState), name="state"),
    )


class PushSubscription(Base):
    """A browser's Web Push subscription (docs/channels.md#browser-push): what
    ``PushManager.subscribe`` gave the page, beside the :class:`Endpoint` of kind
    ``push`` whose deliveries it receives (one each; its id is the endpoint's)."""

    __tablename__ = "wikinotify_push_subscriptions"

    endpoint_id: Mapped[int] = mapped_column(
        RowId, sa.ForeignKey("wikinotify_endpoints.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(HostId)
    #: SHA-256 of the push service URL: a browser's subscription is one, whoever
    #: subscribed it last (unique across accounts).
    url_hash: Mapped[str] = mapped_column(sa.String(64))
    #: The browser's public key (P-256, base64url): the payload is encrypted to it.
    p256dh: Mapped[str] = mapped_column(sa.String(128))
    #: The subscription's authentication secret, sealed.
    auth_encrypted: Mapped[bytes] = mapped_column(sa.LargeBinary)
    #: The browser, as read from its User-Agent when it subscribed ("Firefox on Linux").
    browser: Mapped[str] = mapped_column(sa.String(64), default="", server_default="")
    #: The id of the signed-in session that subscribed (:func:`wikinotify.login.
    #: stream_session_id`): signing that session out removes the subscription.
    session_id: Mapped[str | None] = mapped_column(sa.String(64))
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        sa.UniqueConstraint("url_hash", name="uq_wikinotify_push_subscriptions_url_hash"),
        sa.Index("ix_wikinotify_push_subscriptions_user", "user_id"),
    )

    def __repr__(self) -> str:
        return f"<PushSubscription {self.endpoint_id}>"


metadata = Base.metadata

#: Everything wikinotify keeps of an account: the one list of user-keyed tables, each as
#: the column that names her rows, walked in this order by
#: :func:`wikinotify.accounts.forget_user` (and by whatever exports an account). A column
#: that is a foreign key names the rows that belong to one of her rows of the table it
#: points to, which is listed after it: children go before their parents.
#: tests/test_accounts.py fails when a table with a column naming an account is missing.
#:
#: Left out on purpose, as other people's rows that merely name her: an entry whose
#: actor she was, a mute *of* her (the muter's own choice, kept like her name on an entry
#: in someone's inbox), and an event she caused (the site's outbox, purged a day after
#: its fan-out, which skips an account the wiki no longer has).
OWNED_BY_USER: tuple[sa.orm.InstrumentedAttribute[Any], ...] = (
    PushSubscription.endpoint_id,  # the browser keys of her push endpoints
    PushSubscription.user_id,  # her browsers' push subscriptions, as their reader
    Delivery.endpoint_id,  # deliveries to her endpoints, whoever they name
    Delivery.user_id,  # deliveries to her, as their reader
    Endpoint.owner_id,  # her webhooks and chat targets, with their sealed secrets and URLs
    Notification.user_id,  # her entries, and the mail they wait to send
    Preference.user_id,
    EmailSchedule.user_id,
    SeenMark.user_id,
    ReadMark.user_id,  # her "mark all read" not yet written onto her entries
    Mute.user_id,  # the pages and people she muted
    FeedKey.user_id,  # her feed link's version
)
