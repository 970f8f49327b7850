"""The inbox (docs/rules.md#the-inbox-api): every statement names the user in SQL, so no function
reaches a row by its id alone."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from .. import dialects
from ..models import MAIL_NOT_SENT, EmailState, Notification, NotificationRow, SeenMark, utcnow
from . import read_marks
from .read_marks import effective_read_at, read_values

PAGE_SIZE = 30
#: The badge counts at most this many rows and shows "99+" above 99 (docs/rules.md#the-inbox-api).
BADGE_CAP = 100


class BadCursor(ValueError):
    """A ``cursor`` that this API did not hand out."""


@dataclass(frozen=True)
class Page:
    entries: list[NotificationRow]
    next_cursor: str | None


#: What the list reads of an entry: every column, as table rows rather than ORM entities.
#: Nothing on a page changes them, and building and tracking thirty entities cost the
#: page more than their query did (py-spy, bench/inbox_scale.py). ``read_at`` is the
#: read time its reader sees: its own, else her read mark's (docs/rules.md#read-marks).
_LISTED = sa.select(*(effective_read_at(Notification, sa.bindparam("me", type_=sa.String))
                      if column.key == "read_at" else column
                      for column in Notification.__table__.columns))
#: The same of entries the statement itself finds unread (:func:`_unread`), whose read
#: time is none by that rule: their own ``read_at`` (NULL), without her read mark's three
#: subqueries, which PostgreSQL planned on every page (docs/benchmarks.md#the-inbox-at-scale).
_LISTED_UNREAD = sa.select(*Notification.__table__.columns)


#: A user id or a site id: a value, or a column of the ids :func:`summaries` asks about
#: (or a bound parameter).
Id = str | sa.ColumnElement[str]


def _mine(user_id: Id) -> sa.ColumnElement[bool]:
    return Notification.user_id == user_id


def _on_site(site_id: Id | None) -> sa.ColumnElement[bool]:
    """The site's rows plus the instance-scoped ones (docs/rules.md#the-site-switch)."""
    return sa.or_(Notification.site_id == site_id, Notification.site_id.is_(None))


def _unread(user_id: Id) -> sa.ColumnElement[bool]:
    """Unread by the one rule (:func:`wikinotify.inbox.read_marks.unread`), for her rows."""
    return read_marks.unread(Notification, user_id)


#: The largest row id either database holds (a signed 64-bit integer).
MAX_ID = 2**63 - 1
#: A cursor this API hands out is about 70 characters; anything much longer is not one,
#: and is refused before it is decoded.
MAX_CURSOR = 200
_ID = re.compile(r"[0-9]{1,19}")


def parse_id(raw: str) -> int | None:
    """An entry id as it appears in a URL, or ``None`` if it cannot name a row."""
    if not _ID.fullmatch(raw):
        return None
    value = int(raw)
    return value if 0 < value <= MAX_ID else None


@dataclass(frozen=True)
class Filters:
    """What the inbox is narrowed to (docs/rules.md#the-inbox-api): they combine."""

    category: str | None = None
    page_id: str | None = None
    unread: bool = False

    def fingerprint(self) -> str:
        """A short digest of the filters, carried in the cursor: a cursor is for the list
        it came from, and the next page of another list is refused rather than guessed."""
        raw = json.dumps([self.category, self.page_id, self.unread]).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

    def shape(self) -> tuple[bool, bool, bool]:
        """Which filters are set: the list's statement is built once per shape, the
        values bound (:meth:`where`, :meth:`parameters`)."""
        return self.category is not None, self.page_id is not None, self.unread

    @staticmethod
    def where(shape: tuple[bool, bool, bool]) -> list[sa.ColumnElement[bool]]:
        category, page, unread = shape
        conditions = []
        if category:
            conditions.append(Notification.category == sa.bindparam("category", type_=sa.String))
        if page:
            conditions.append(Notification.page_id == sa.bindparam("page", type_=sa.String))
        if unread:
            conditions.append(_unread(sa.bindparam("me", type_=sa.String)))
        return conditions

    def parameters(self) -> dict[str, Any]:
        return {"category": self.category, "page": self.page_id}


def encode_cursor(entry: NotificationRow, filters: Filters = Filters()) -> str:
    raw = json.dumps([entry.updated_at.isoformat(), entry.id, filters.fingerprint()]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, filters: Filters = Filters()) -> tuple[datetime, int]:
    """The ``(updated_at, id)`` a cursor of :func:`encode_cursor` holds, given for the same
    ``filters``; anything else (however deep, long or large, or another list's) is a
    :class:`BadCursor`, never a database error."""
    if len(cursor) > MAX_CURSOR:
        raise BadCursor(cursor)
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        updated_at, entry_id, fingerprint = json.loads(base64.urlsafe_b64decode(padded))
        when = datetime.fromisoformat(updated_at)
        if when.tzinfo is None:
            raise ValueError("a cursor's time carries its zone")
        when = when.astimezone(UTC)  # year 1 at +01:00 is before what a datetime holds
    except (ValueError, TypeError, OverflowError, RecursionError, binascii.Error) as error:
        raise BadCursor(cursor) from error
    if type(entry_id) is not int or not 0 < entry_id <= MAX_ID:
        raise BadCursor(cursor)
    if fingerprint != filters.fingerprint():
        raise BadCursor(cursor)
    return when, entry_id


class _Shape(NamedTuple):
    """What a list statement depends on besides its bound values."""

    #: How many pinned categories head it (0: no pinned part).
    pinned: int
    #: A site (else only the instance-scoped entries, ``site_id IS NULL``).
    site: bool
    filters: tuple[bool, bool, bool]
    #: After a cursor.
    after: bool
    #: How many rows the inbox walk reads.
    rows: int


@functools.cache
def _list_statement(shape: _Shape) -> sa.Select[Any]:
    """The list's statement for ``shape``, built once and then only bound: building a
    statement and its cache key anew cost a page more Python than its round trip
    (py-spy, bench/inbox_scale.py). Parameters: ``me``, ``site``, ``category``, ``page``,
    ``after_at``, ``after_id``, ``pinned`` (the categories)."""
    me = _mine(sa.bindparam("me", type_=sa.String))
    site = _on_site(sa.bindparam("site", type_=sa.String) if shape.site else None)
    filters = Filters.where(shape.filters)
    walk = (
        _LISTED
        .where(me, Notification.in_app.is_(True), site, *filters)
        .order_by(Notification.updated_at.desc(), Notification.id.desc())
        .limit(shape.rows)
    )
    if shape.after:
        after = sa.tuple_(sa.bindparam("after_at", type_=Notification.updated_at.type),
                          sa.bindparam("after_id", type_=sa.BigInteger))
        walk = walk.where(sa.tuple_(Notification.updated_at, Notification.id) < after)
    if not shape.pinned:
        return walk
    pinned = (
        _LISTED_UNREAD.add_columns(sa.literal_column("0", sa.Integer).label("pinned"))
        # A short range of the unread index per category (user, category first), not a
        # read of every unread row of hers (docs/benchmarks.md#the-inbox-at-scale).
        .where(me, Notification.in_app, site, _unread(sa.bindparam("me", type_=sa.String)),
               Notification.category.in_(sa.bindparam("pinned", expanding=True)), *filters)
        .order_by(Notification.updated_at.desc(), Notification.id.desc())
        .limit(PINNED_CAP)
    )
    walk = walk.add_columns(sa.literal_column("1", sa.Integer).label("pinned"))
    return sa.union_all(pinned.subquery().select(), walk.subquery().select()).subquery().select()


def _listed(session: Session, user_id: str, site_id: str | None, categories: Sequence[str],
            cursor: str | None, filters: Filters, rows: int) -> Sequence[Any]:
    """The rows of the list's statement (:func:`_list_statement`)."""
    parameters = {"me": user_id, "site": site_id, "pinned": list(categories),
                  **filters.parameters()}
    if cursor:
        parameters["after_at"], parameters["after_id"] = decode_cursor(cursor, filters)
    shape = _Shape(len(categories), site_id is not None, filters.shape(), bool(cursor), rows)
    # Any: a Row's count() is tuple's, where NotificationRow's count is a column.
    found: Sequence[Any] = session.execute(_list_statement(shape), parameters).all()
    return found


def _page(rows: Sequence[NotificationRow], filters: Filters, limit: int) -> Page:
    """A page of ``limit`` of ``rows`` (one more tells that a next page exists)."""
    entries = list(rows[:limit])
    return Page(entries, encode_cursor(entries[-1], filters) if len(rows) > limit else None)


def list_entries(
    session: Session,
    user_id: str,
    site_id: str | None,
    *,
    cursor: str | None = None,
    filters: Filters = Filters(),
    limit: int = PAGE_SIZE,
) -> Page:
    """One page of the inbox, newest activity first, keyset on ``(updated_at, id)``.

    The filters are further conditions on the same walk of the inbox index
    ``(user_id, updated_at, id)``, not indexes of their own: the walk never leaves this
    user's rows, so a rare category or page reads at most her own inbox (which retention
    bounds, docs/rules.md#retention), while an index per filter would be paid on every
    fan-out write."""
    return _page(_listed(session, user_id, site_id, (), cursor, filters, limit + 1),
                 filters, limit)


#: At most this many pinned entries head the list; more wait their turn in it.
PINNED_CAP = 10


def _newest_first(rows: Iterable[NotificationRow]) -> list[NotificationRow]:
    return sorted(rows, key=lambda row: (row.updated_at, row.id), reverse=True)


def list_with_pinned(
    session: Session,
    user_id: str,
    site_id: str | None,
    categories: Sequence[str],
    *,
    cursor: str | None = None,
    filters: Filters = Filters(),
    limit: int = PAGE_SIZE,
) -> tuple[list[NotificationRow], Page]:
    """The pinned entries and a page of :func:`list_entries` without them. Pinned: the
    user's unread entries of ``categories`` (those a category pins, an announcement),
    newest first, at most :data:`PINNED_CAP`; the list shows them first until they are
    read (docs/rules.md#announcements), and no page of it shows them again.

    One statement, the two walks joined by ``UNION ALL``: the page's walk reads
    :data:`PINNED_CAP` rows more, for the pinned ones it leaves out (a round trip and a
    statement's work less on every page than two statements)."""
    if not categories:
        return [], list_entries(session, user_id, site_id, cursor=cursor, filters=filters,
                                limit=limit)
    rows = _listed(session, user_id, site_id, categories, cursor, filters,
                   limit + 1 + PINNED_CAP)
    first = _newest_first(row for row in rows if row.pinned == 0)
    skipped = {row.id for row in first}
    listed = _newest_first(row for row in rows if row.pinned == 1 and row.id not in skipped)
    return first, _page(listed, filters, limit)


def _capped_count(*conditions: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
    """How many of the user's in-app entries on this site match, counted from at most
    :data:`BADGE_CAP` rows of the badge index."""
    capped = (
        sa.select(sa.literal(1))
        .select_from(Notification)
        # Every condition here (the user, unread, the site, in-app) is a column or the
        # predicate of the unread index: the count reads the index alone
        # (docs/benchmarks.md#the-inbox-at-scale).
        .where(Notification.in_app, *conditions)
        .limit(BADGE_CAP)
        # A subquery in FROM is not correlated by itself: without this, conditions on
        # :func:`summaries`' ids would join all of them in here, and count everyone's.
        .correlate_except(Notification)
        .subquery()
    )
    return sa.select(sa.func.count()).select_from(capped).scalar_subquery()


def _unseen(user_id: Id, site_id: Id | None) -> sa.ScalarSelect[int]:
    """Unread entries created or updated since the user last opened the menu or the
    inbox (all of them if never)."""
    seen_at = (
        sa.select(SeenMark.seen_at)
        .where(SeenMark.user_id == user_id)
        .correlate_except(SeenMark)  # see _capped_count: it sits in a subquery in FROM
        .scalar_subquery()
    )
    return _capped_count(_mine(user_id), _unread(user_id), _on_site(site_id),
                         sa.or_(seen_at.is_(None), Notification.updated_at > seen_at))


def unseen_count(session: Session, user_id: str, site_id: str | None) -> int:
    """The badge's number (the header's first paint): one query."""
    return session.execute(sa.select(_unseen(user_id, site_id))).scalar_one()


@dataclass(frozen=True)
class Summary:
    unread: int
    #: Unread and new since the user last looked (the badge's number).
    unseen: int
    #: When anything in the inbox last changed (what tells a client to reload its list).
    latest_at: datetime | None


#: :func:`summaries` asks for at most this many users' summaries in one statement.
SUMMARIES_PER_STATEMENT = 1000


def _summary_row(user_id: Id, site_id: Id | None) -> list[sa.ScalarSelect[Any]]:
    """The badge's counts and the inbox's last change: three scalar subqueries."""
    # ORDER BY … LIMIT 1 rather than max(): it walks the inbox index backwards, and the
    # value comes back through the column type (SQLite's max() would return text).
    latest = (
        sa.select(Notification.updated_at)
        .where(_mine(user_id), Notification.in_app.is_(True))
        .order_by(Notification.updated_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    unread = _capped_count(_mine(user_id), _unread(user_id), _on_site(site_id))
    return [unread, _unseen(user_id, site_id), latest]


def summary(session: Session, user_id: str, site_id: str | None) -> Summary:
    """The badge's counts and the inbox's last change, in one statement."""
    row = session.execute(_summary_statement(), {"me": user_id, "site": site_id}).one()
    return Summary(row[0], row[1], row[2])


@functools.cache
def _summary_statement() -> sa.Select[Any]:
    """:func:`summary`'s statement, built once and then only bound (``me``, ``site``):
    building it and its cache key anew cost more Python than its round trip
    (docs/benchmarks.md#the-read-mark-session-14). A ``site`` of ``None`` matches no
    row's site, so the instance-scoped rows alone are counted, as :func:`_on_site` says."""
    return sa.select(*_summary_row(sa.bindparam("me", type_=sa.String),
                                   sa.bindparam("site", type_=sa.String)))


def summaries(
    session: Session, wanted: Sequence[tuple[str, str | None]]
) -> dict[tuple[str, str | None], Summary]:
    """:func:`summary` of each ``(user id, site id)``, :data:`SUMMARIES_PER_STATEMENT` to
    a statement: the open streams a fan-out wakes read theirs together, in one round
    trip instead of one each. The ids travel as one JSON text that the database unpacks
    into a table (``json_array_elements``, ``json_each``), and each row's summary is the
    same subqueries as :func:`summary`'s, correlated to it: one statement of one
    parameter whatever the number of ids, compiled once by SQLAlchemy and parsed once by
    psycopg. As a table of constants with two bound parameters an id (``SELECT … UNION
    ALL …``), a statement per size was compiled whenever a wake's last hundred came in a
    new size, and psycopg, which caches a statement's parsing only up to 4 KB and 50
    parameters, parsed its text again every time: half of a wake's Python (py-spy,
    bench/live.py)."""
    statement = _summaries_statement(dialects.is_postgresql(session))
    found: dict[tuple[str, str | None], Summary] = {}
    for start in range(0, len(wanted), SUMMARIES_PER_STATEMENT):
        chunk = wanted[start:start + SUMMARIES_PER_STATEMENT]
        readers = json.dumps([[user_id, site_id] for user_id, site_id in chunk])
        for row in session.execute(statement, {_READERS: readers}):
            found[chunk[row[0]]] = Summary(row[1], row[2], row[3])
    return found


#: :func:`summaries`' parameter: ``[[user id, site id or null], …]`` as JSON.
_READERS = "wikinotify_readers"


@functools.cache
def _summaries_statement(postgresql: bool) -> sa.Select[Any]:
    """:func:`summaries`' statement: its ids as a table ``(n, user_id, site_id)``, ``n``
    each one's place in the JSON array."""
    readers = sa.bindparam(_READERS, type_=sa.Text)
    if postgresql:
        each = sa.func.json_array_elements(sa.cast(readers, sa.JSON)).table_valued(
            sa.column("value", sa.JSON), with_ordinality="n").render_derived("readers")
        ids = sa.select((each.c.n - 1).label("n"),
                        each.c.value.op("->>")(0).label("user_id"),
                        each.c.value.op("->>")(1).label("site_id")).cte("ids")
    else:
        each = sa.func.json_each(readers).table_valued("key", "value").alias("readers")
        ids = sa.select(each.c.key.label("n"),
                        sa.func.json_extract(each.c.value, "$[0]").label("user_id"),
                        sa.func.json_extract(each.c.value, "$[1]").label("site_id")).cte("ids")
    return sa.select(ids.c.n, *_summary_row(ids.c.user_id, ids.c.site_id))


def mark_seen(session: Session, user_id: str) -> None:
    """Stamp the user's seen time (one row per user, an upsert: two tabs may race)."""
    now = utcnow()
    session.execute(
        dialects.insert(session, SeenMark)
        .values(user_id=user_id, seen_at=now)
        .on_conflict_do_update(index_elements=["user_id"], set_={"seen_at": now})
    )


def mark_read(session: Session, user_id: str, entry_id: int) -> bool:
    """Mark one of the user's entries read; ``False`` if they have no such entry."""
    exists = session.scalar(
        sa.select(Notification.id).where(_mine(user_id), Notification.id == entry_id)
    )
    if exists is None:
        return False
    session.execute(
        sa.update(Notification)
        .where(_mine(user_id), Notification.id == entry_id, _unread(user_id))
        .values(**read_values())
    )
    return True


def unread_on_site(
    user_id: str, site_id: str | None, page_id: str | None = None
) -> list[sa.ColumnElement[bool]]:
    """What "mark all read" marks: the user's unread entries on this site, or only those
    about ``page_id``."""
    conditions = [_mine(user_id), _unread(user_id), _on_site(site_id)]
    if page_id is not None:
        conditions.append(Notification.page_id == page_id)
    return conditions


def mark_all_read(
    session: Session, user_id: str, site_id: str | None, *, page_id: str | None = None,
    at: datetime | None = None,
) -> int:
    """Mark every unread entry on this site read, or only those about ``page_id``; answer
    how many. Every entry: a read mark (docs/rules.md#read-marks) whose job the caller asks
    for after its commit (:func:`wikinotify.inbox.read_marks.kick`); a page's: at once."""
    at = at or utcnow()
    if page_id is not None:  # a page's few: at once
        query = sa.update(Notification).where(*unread_on_site(user_id, site_id, page_id))
        return dialects.rowcount(session.execute(query.values(**read_values(at))))
    # Everything: one read mark, written onto the rows by a job (docs/rules.md#read-marks).
    read_marks.placing_a_mark(session)
    read_marks.settle_mine(session, user_id)  # at most one mark a reader
    unread = unread_on_site(user_id, site_id)
    count = session.scalar(sa.select(sa.func.count()).select_from(Notification).where(*unread))
    # Her pending mail is cancelled now, as reading cancels it (the mail index: few rows).
    session.execute(sa.update(Notification)
                    .where(*unread, Notification.email_state.in_(MAIL_NOT_SENT))
                    .values(email_state=EmailState.SKIPPED)
                    .execution_options(synchronize_session=False))
    read_marks.place(session, user_id, site_id, at)
    return count or 0


def no_unread_twin(user_id: str) -> sa.ColumnElement[bool]:
    """The entry has no unread twin: no other unread entry of the user with its group key.
    One unread entry per (user, group key) is the coalescing slot
    (docs/rules.md#coalescing-is-idempotency): an entry made unread again, or put back by
    an undo, takes the slot only while it is free. The slot is the row's own ``read_at``
    (the unique index's), not the read-mark rule: whatever makes a row unread settles her
    mark first (:func:`wikinotify.inbox.read_marks.settle_mine`), so the two agree here."""
    twin = aliased(Notification)
    return ~sa.exists().where(*unread_with_key(twin, user_id, Notification.group_key),
                              twin.id != Notification.id)


def unread_with_key(
    model: type[Notification], user_id: str, group_key: str | sa.ColumnExpressionArgument[str]
) -> list[sa.ColumnElement[bool]]:
    """The user's unread entry with ``group_key`` (there is at most one)."""
    return [model.user_id == user_id, model.group_key == group_key, model.read_at.is_(None)]


class TwinUnread(Exception):
    """A newer unread entry about the same thing holds the coalescing slot."""


def mark_unread(session: Session, user_id: str, entry_id: int) -> bool:
    """Mark one of the user's read entries unread again; ``False`` if they have no such
    entry, :class:`TwinUnread` if a newer unread entry has the slot (it carries on: later
    events join it). The mail that reading cancelled stays cancelled
    (docs/rules.md#unread-again)."""
    state = session.execute(
        sa.select(effective_read_at(Notification, user_id))
        .where(_mine(user_id), Notification.id == entry_id)
    ).one_or_none()
    if state is None:
        return False
    if state.read_at is None:
        return True
    # A mark of hers would keep the row read whatever its own read_at says.
    read_marks.settle_mine(session, user_id)
    try:
        with dialects.savepoint(session):
            marked = dialects.rowcount(session.execute(
                sa.update(Notification)
                .where(_mine(user_id), Notification.id == entry_id, no_unread_twin(user_id))
                .values(read_at=None)
            ))
    except sa.exc.IntegrityError:  # a fan-out took the slot between the check and the write
        marked = 0
    if not marked:
        raise TwinUnread()
    return True


def take(session: Session, user_id: str, entry_id: int) -> sa.RowMapping | None:
    """Delete one of the user's entries and answer the row it was (every column: what
    an undo puts back); ``None`` if they have no such entry."""
    return session.execute(
        sa.delete(Notification)
        .where(_mine(user_id), Notification.id == entry_id)
        .returning(*Notification.__table__.columns)
    ).mappings().first()


def dismiss(session: Session, user_id: str, entry_id: int) -> bool:
    """Delete one of the user's entries; ``False`` if they have no such entry."""
    return take(session, user_id, entry_id) is not None


def _unread_on_page(user_id: str, page_id: str, categories: list[str]) -> list[Any]:
    return [
        _mine(user_id),
        _unread(user_id),
        Notification.page_id == page_id,
        Notification.category.in_(categories),
    ]


def has_unread_on_page(
    session: Session, user_id: str, page_id: str, categories: Iterable[str]
) -> bool:
    """Whether the user has an unread entry of ``categories`` about ``page_id``."""
    conditions = _unread_on_page(user_id, page_id, list(categories))
    return session.scalar(sa.select(Notification.id).where(*conditions).limit(1)) is not None


def mark_page_read(
    session: Session, user_id: str, page_id: str, categories: Iterable[str]
) -> int:
    """Mark the user's unread entries of ``categories`` about ``page_id`` read
    (mark-read-on-view, :mod:`wikinotify.inbox.viewing`)."""
    categories = list(categories)
    if not categories:
        return 0
    query = sa.update(Notification).where(*_unread_on_page(user_id, page_id, categories))
    return dialects.rowcount(session.execute(query.values(**read_values())))
