"""Writing a batch's entries (docs/rules.md#coalescing-is-idempotency): one coalescing upsert for
both dialects. A recipient with an unread entry under the same group key has the event counted into
it; a replayed event changes nothing. The rows come from :mod:`wikinotify.pipeline.rows`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .. import dialects
from ..models import MAIL_NOT_SENT, EmailState, Notification
from .audience import CANDIDATE_BATCH

#: Rows per upsert (docs/rules.md#writing-entries): a whole batch, copied (PostgreSQL) or inserted
#: (SQLite) into a staging table and merged by one statement.
WRITE_BATCH = CANDIDATE_BATCH
#: An email state a coalescing event leaves alone (docs/rules.md#mail-cadence): the mail that is due
#: absorbs the event, and a sent (or hopeless) one stays quiet until the entry is read.
MAIL_ALREADY_DECIDED = (*MAIL_NOT_SENT, EmailState.SENT, EmailState.FAILED)

#: The key of an entry's data that counts its events by variant ({"edited": 3, "moved": 2}).
COUNTS = "variant_counts"

#: The columns that differ from one recipient to the next; the rest are the event's.
PER_RECIPIENT = ("user_id", "in_app", "email_state", "email_after")
#: One recipient's row: the values of :data:`PER_RECIPIENT`, in that order. A tuple, as
#: the COPY writes it: a batch builds thousands.
Person = tuple[str, bool, str, datetime | None]


def _counted_data(
    new: sa.ColumnCollection[str, sa.ColumnElement[Any]], postgres: bool
) -> sa.ColumnElement[Any]:
    """The new event's data with the entry's per-variant counts, this variant's one up:
    computed in the upsert itself, so coalescing stays one statement per batch."""
    # literal: a constant of the one cached statement
    key: sa.ColumnClause[str] = sa.literal_column(f"'{COUNTS}'")
    # Each database builds these from its own functions, so they are typed as what both are.
    kept: sa.ColumnElement[Any]
    counts: sa.ColumnElement[Any]
    if postgres:
        kept = Notification.data.op("->")(key)
        num = sa.func.coalesce(sa.cast(kept.op("->>")(new.variant), sa.Integer), 0) + 1
        counts = sa.func.coalesce(kept, sa.text("'{}'::jsonb")).op("||")(
            sa.func.jsonb_build_object(new.variant, num)
        )
        return new.data.op("||", return_type=postgresql.JSONB)(
            sa.func.jsonb_build_object(key, counts)
        )
    path = sa.literal_column("'$.\"'", sa.String) + new.variant + sa.literal_column("'\"'")
    kept = sa.func.json_extract(Notification.data, sa.literal_column(f"'$.{COUNTS}'"))
    num = sa.func.coalesce(
        sa.func.json_extract(kept, path), sa.literal_column("0")
    ) + sa.literal_column("1")
    counts = sa.func.json_set(
        sa.func.json(sa.func.coalesce(kept, sa.literal_column("'{}'"))), path, num
    )
    return sa.func.json_set(new.data, sa.literal_column(f"'$.{COUNTS}'"), counts)


def _coalesce(
    new: sa.ColumnCollection[str, sa.ColumnElement[Any]], postgres: bool
) -> dict[str, Any]:
    """``SET`` of an entry an event lands on while it is unread
    (docs/rules.md#coalescing-is-idempotency, docs/rules.md#mail-cadence)."""
    # Literal states, not bound ones: constants of the one cached statement.
    decided: list[sa.ColumnClause[str]] = [
        sa.literal_column(f"'{state}'") for state in MAIL_ALREADY_DECIDED
    ]
    keep_mail = Notification.email_state.in_(decided)
    seen = Notification.variants.like("%," + new.variant + ",%")
    grown = Notification.variants + new.variant + ","
    return {
        "count": Notification.count + 1,
        "variant": new.variant,
        "variants": sa.case((seen, Notification.variants), else_=grown),
        "data": _counted_data(new, postgres),
        "actor_id": new.actor_id,
        "comment_id": new.comment_id,
        "last_event_id": new.last_event_id,
        "in_app": new.in_app,
        "updated_at": new.updated_at,
        "email_state": sa.case((keep_mail, Notification.email_state), else_=new.email_state),
        "email_after": sa.case((keep_mail, Notification.email_after), else_=new.email_after),
    }


def _on_conflict(
    statement: postgresql.Insert | sqlite.Insert,
) -> postgresql.Insert | sqlite.Insert:
    return statement.on_conflict_do_update(
        index_elements=[Notification.user_id, Notification.group_key],
        index_where=Notification.read_at.is_(None),
        set_=_coalesce(statement.excluded, isinstance(statement, postgresql.Insert)),
        # The same event again (a retried fan-out) is not news
        # (docs/rules.md#coalescing-is-idempotency).
        where=Notification.last_event_id != statement.excluded.last_event_id,
    )


#: A batch's per-recipient columns go into this temporary table, which the upsert's one
#: ``INSERT … SELECT`` reads with the event's values bound once. On PostgreSQL it is made
#: once per connection (``IF NOT EXISTS``: a catalog look-up) and emptied by every commit
#: (``ON COMMIT DELETE ROWS``) and rollback: made and dropped by each batch, as it was, it
#: cost the database some 6 ms a batch in catalog writes (docs/benchmarks.md#the-fan-out).
#: A second upsert in the same transaction empties it first. SQLite's is kept by the
#: connection and emptied by each upsert.
_STAGE = sa.table(
    "wikinotify_fanout_stage",
    *(sa.column(name, Notification.__table__.c[name].type) for name in PER_RECIPIENT),
)
_CREATE_STAGE = sa.text(
    "CREATE TEMPORARY TABLE IF NOT EXISTS wikinotify_fanout_stage (user_id text, in_app boolean, "
    "email_state text, email_after timestamptz) ON COMMIT DELETE ROWS"
)
_COPY_STAGE = (
    "COPY wikinotify_fanout_stage (user_id, in_app, email_state, email_after) "
    "FROM STDIN (FORMAT BINARY)"
)
_STAGE_TYPES = ("text", "bool", "text", "timestamptz")
_TRUNCATE_STAGE = sa.text("TRUNCATE wikinotify_fanout_stage")
#: The key, in a connection's ``info``, of the transaction whose rows the stage holds.
_STAGED = "wikinotify_fanout_staged"
_CREATE_STAGE_SQLITE = sa.text(
    "CREATE TEMPORARY TABLE IF NOT EXISTS wikinotify_fanout_stage (user_id TEXT, "
    "in_app BOOLEAN, email_state TEXT, email_after DATETIME)"
)
_EMPTY_STAGE = sa.text("DELETE FROM wikinotify_fanout_stage")


def _upsert_postgresql(
    session: Session, shared: dict[str, Any], people: list[Person]
) -> None:
    """The batch in two statements whatever its size: one binary COPY of what varies
    (four columns) into the staging table, and one ``INSERT … SELECT`` from it. psycopg
    writes COPY rows in C, where a Python list bound as an array is dumped element by
    element in Python: for the four per-recipient arrays of ``unnest`` that was most of
    the fan-out's time (docs/benchmarks.md#the-fan-out)."""
    import psycopg  # wikinotify's PostgreSQL driver (the ``postgresql`` extra)

    bound = session.connection()
    transaction = bound.get_transaction()
    if bound.info.get(_STAGED) is transaction:
        session.execute(_TRUNCATE_STAGE)  # an earlier upsert's rows, not yet committed
    else:
        session.execute(_CREATE_STAGE)
    bound.info[_STAGED] = transaction
    # The psycopg connection under the session's, in the same transaction.
    connection: Any = bound.connection.driver_connection
    try:
        with connection.cursor() as cursor, cursor.copy(_COPY_STAGE) as copy:
            copy.set_types(_STAGE_TYPES)
            for person in people:
                copy.write_row(person)
    except psycopg.Error as error:
        # The COPY goes past SQLAlchemy, so its errors arrive raw: raised as SQLAlchemy
        # raises the others, so that a lost connection reads as one (the run hands its
        # claims back, burning no attempt) and the pool drops that connection.
        lost = bool(connection.broken)
        if lost:
            session.connection().invalidate()
        raise sa.exc.DBAPIError.instance(
            _COPY_STAGE, None, error, psycopg.Error, connection_invalidated=lost
        ) from error
    session.execute(_merge_stage(shared, postgresql.insert))


def _upsert_sqlite(
    session: Session, shared: dict[str, Any], people: list[Person]
) -> None:
    """The same merge, the staging table filled by an executemany of four columns: the
    event's values (the snapshot's JSON among them) are processed once, not per row."""
    session.execute(_CREATE_STAGE_SQLITE)
    session.execute(_EMPTY_STAGE)
    session.execute(sa.insert(_STAGE), [dict(zip(PER_RECIPIENT, p, strict=True)) for p in people])
    session.execute(_merge_stage(shared, sqlite.insert))
    session.execute(_EMPTY_STAGE)


def _merge_stage(
    shared: dict[str, Any], insert: Any
) -> postgresql.Insert | sqlite.Insert:
    """``INSERT … SELECT`` of the staging table's rows with the event's values bound
    once, coalescing as :func:`_on_conflict` says."""
    table = Notification.__table__
    values = [sa.literal(value, table.c[name].type) for name, value in shared.items()]
    # WHERE true: without a WHERE, SQLite would read the ON of ON CONFLICT as a join's.
    select = sa.select(*values, *(_STAGE.c[name] for name in PER_RECIPIENT)).where(sa.true())
    return _on_conflict(insert(table).from_select([*shared, *PER_RECIPIENT], select))


#: Set at the start of each fan-out write transaction on PostgreSQL (see :func:`upsert`).
_ASYNC_COMMIT = sa.text("SET LOCAL synchronous_commit = off")


def upsert(session: Session, shared: dict[str, Any], people: list[Person]) -> None:
    """Write the entries a batch at a time; a recipient who already has an unread entry under
    the same group key has it coalesced into, and a replayed event changes nothing
    (docs/rules.md#coalescing-is-idempotency).

    A replay is recognised by ``last_event_id``: an event replayed after a later event
    coalesced into the same entry would count once more. That needs a worker to die
    mid-event and a newer event to land on the same entry first; it is the price of not
    keeping every event id on every entry.
    """
    if dialects.is_postgresql(session):
        # This transaction's commit returns before its WAL reaches the disk; LOCAL, so
        # only this transaction (one batch: its rows and the cursor that covers them).
        # Safe because a crash of the database can only lose the newest commits, in WAL
        # order, each with its rows and its cursor together: the event is then simply
        # less far along, and the replay of the lost batch is a no-op or a first write
        # (idempotent by event id, docs/rules.md#coalescing-is-idempotency). Nothing outside trusts
        # an unflushed batch: any later synchronous commit (the event marked processed, a mail
        # claimed for sending, an entry read) flushes the WAL up to itself, this batch included.
        session.execute(_ASYNC_COMMIT)
    write = _upsert_postgresql if dialects.is_postgresql(session) else _upsert_sqlite
    for start in range(0, len(people), WRITE_BATCH):
        write(session, shared, people[start : start + WRITE_BATCH])
