"""Writing a batch's entries (docs/rules.md#coalescing-is-idempotency): one coalescing upsert for
both dialects. A recipient with an unread entry under the same group key has the event counted into
it; a replayed event changes nothing. The rows come from :mod:`wikinotify.pipeline.rows`."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .. import dialects
from ..inbox import read_marks
from ..models import ACTORS, ACTORS_KEPT, MAIL_NOT_SENT, EmailState, Notification
from .audience import BATCH_GROWTH, CANDIDATE_BATCH

#: Rows per upsert (docs/rules.md#writing-entries): a whole batch, the largest a walk reads
#: (:func:`~.audience.batch_size`), its readers one JSON value merged by one statement
#: (PostgreSQL; SQLite: one per group of readers, see :func:`_merge`).
WRITE_BATCH = CANDIDATE_BATCH * BATCH_GROWTH
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


#: How many people an entry's data names already (a subquery on the row being updated).
_NAMED = {
    True: f"(SELECT count(*) FROM jsonb_object_keys({Notification.__tablename__}.data -> "
          f"'{ACTORS}'))",
    False: f"(SELECT count(*) FROM json_each({Notification.__tablename__}.data, "
           f"'$.{ACTORS}'))",
}


def _actors(
    new: sa.ColumnCollection[str, sa.ColumnElement[Any]], postgres: bool
) -> sa.ColumnElement[Any]:
    """The entry's people with the new event's actor added (by id, so a renamed person is
    one), until :data:`ACTORS_KEPT` are named."""
    full = sa.literal_column(_NAMED[postgres]) >= sa.literal_column(str(ACTORS_KEPT))
    # Each database builds these from its own functions, so they are typed as what both are.
    kept: sa.ColumnElement[Any]
    added: sa.ColumnElement[Any]
    if postgres:
        empty = sa.text("'{}'::jsonb")
        key: sa.ColumnClause[str] = sa.literal_column(f"'{ACTORS}'")
        kept = sa.func.coalesce(Notification.data.op("->")(key), empty)
        added = kept.op("||", return_type=postgresql.JSONB)(
            sa.func.coalesce(new.data.op("->")(key), empty))
        return sa.case((full, kept), else_=added)
    path: sa.ColumnClause[str] = sa.literal_column(f"'$.{ACTORS}'")
    kept = sa.func.coalesce(sa.func.json_extract(Notification.data, path),
                            sa.literal_column("'{}'"))
    added = sa.func.json_patch(kept, sa.func.coalesce(sa.func.json_extract(new.data, path),
                                                      sa.literal_column("'{}'")))
    return sa.func.json(sa.case((full, kept), else_=added))


def _counted_data(
    new: sa.ColumnCollection[str, sa.ColumnElement[Any]], postgres: bool
) -> sa.ColumnElement[Any]:
    """The new event's data with the entry's per-variant counts, this variant's one up,
    and its people (:func:`_actors`): computed in the upsert itself, so coalescing stays
    one statement per batch."""
    # literal: a constant of the one cached statement
    key: sa.ColumnClause[str] = sa.literal_column(f"'{COUNTS}'")
    people: sa.ColumnClause[str] = sa.literal_column(f"'{ACTORS}'")
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
            sa.func.jsonb_build_object(key, counts, people, _actors(new, postgres))
        )
    path = sa.literal_column("'$.\"'", sa.String) + new.variant + sa.literal_column("'\"'")
    kept = sa.func.json_extract(Notification.data, sa.literal_column(f"'$.{COUNTS}'"))
    num = sa.func.coalesce(
        sa.func.json_extract(kept, path), sa.literal_column("0")
    ) + sa.literal_column("1")
    counts = sa.func.json_set(
        sa.func.json(sa.func.coalesce(kept, sa.literal_column("'{}'"))), path, num
    )
    return sa.func.json_set(new.data, sa.literal_column(f"'$.{COUNTS}'"), counts,
                            sa.literal_column(f"'$.{ACTORS}'"), _actors(new, postgres))


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


#: PostgreSQL: a batch's recipients as one JSON value, grouped by what else their rows
#: hold (nearly everyone of a batch shares one ``in_app``, email state and due time):
#: ``[{"in_app": …, "email_state": …, "email_after": …, "users": [ids…]}, …]``, unpacked
#: by the merge itself: ``json_to_recordset``, then each group's ids with
#: ``json_array_elements_text``.
_PEOPLE = "wikinotify_people"
_GROUPS = sa.func.json_to_recordset(
    sa.cast(sa.bindparam(_PEOPLE, type_=sa.Text), postgresql.JSON)
).table_valued(
    sa.column("in_app", sa.Boolean),
    sa.column("email_state", sa.Text),
    sa.column("email_after", postgresql.TIMESTAMP(timezone=True)),
    sa.column("users", postgresql.JSON),
).render_derived("people", with_types=True)
_EACH = sa.func.json_array_elements_text(_GROUPS.c.users).table_valued("user_id").render_derived(
    "person").lateral()
#: SQLite: one group's ids as a JSON array (``json_each``); the group's own columns are
#: bound. Not the whole batch in one value: SQLite (before 3.45) parses a JSON value again
#: at every ``json_extract``, and a group's columns read beside its 5,000 ids were parsed
#: 5,000 times.
_IDS_SQLITE = sa.func.json_each(sa.bindparam(_PEOPLE, type_=sa.Text)).table_valued(
    "value").alias("person")

Group = tuple[bool, str, datetime | None]


def _grouped(people: list[Person]) -> dict[Group, list[str]]:
    """Recipients by what else their rows hold: a batch has a handful of groups."""
    groups: dict[Group, list[str]] = {}
    for user_id, in_app, email_state, email_after in people:
        key = (in_app, email_state, email_after)
        found = groups.get(key)
        if found is None:
            found = groups[key] = []
        found.append(user_id)
    return groups


def _bound(name: str) -> str:
    """The bind parameter of column ``name``'s value in :func:`_statement`."""
    return f"wikinotify_{name}"


@functools.cache
def _statement(postgres: bool, shared: tuple[str, ...]) -> postgresql.Insert | sqlite.Insert:
    """The merge of a batch whose shared columns are ``shared`` (their values, and on SQLite
    a group's own columns, bound by :func:`_bound`'s names), built once per process: built
    anew at every batch, it cost the writer's thread some 1.6 ms of Python a statement (on
    SQLite one per group of recipients), on the cores where the run decides the next batch
    (docs/benchmarks.md#sqlite-the-embedded-default)."""
    table = Notification.__table__
    values = [sa.bindparam(_bound(name), type_=table.c[name].type) for name in shared]
    if postgres:
        select = sa.select(*values, _EACH.c.user_id, _GROUPS.c.in_app, _GROUPS.c.email_state,
                           _GROUPS.c.email_after).select_from(_GROUPS.join(_EACH, sa.true()))
        return _on_conflict(postgresql.insert(table).from_select([*shared, *PER_RECIPIENT],
                                                                 select))
    own = [sa.bindparam(_bound(name), type_=table.c[name].type) for name in PER_RECIPIENT[1:]]
    # WHERE true: without a WHERE, SQLite would read the ON of ON CONFLICT as a join's.
    select = sa.select(*values, _IDS_SQLITE.c.value, *own).where(sa.true())
    return _on_conflict(sqlite.insert(table).from_select([*shared, *PER_RECIPIENT], select))


def _merge(session: Session, shared: dict[str, Any], people: list[Person]) -> None:
    """The batch's recipients as JSON text made in C by ``json.dumps`` (which escapes any
    id), unpacked and merged by ``INSERT … SELECT`` with the event's values bound once,
    coalescing as :func:`_on_conflict` says: on PostgreSQL one statement for the batch, on
    SQLite one per group of recipients (:func:`_grouped`; no round trip to save there).

    On PostgreSQL a binary COPY used to fill a temporary staging table that the merge read:
    four statements a batch (the table made, the COPY, the merge, the table dropped), a
    Python ``write_row`` call per recipient on the writer's thread, where it took the
    interpreter from the thread deciding the next batch, and catalog writes each batch. On
    SQLite an executemany filled it, SQLAlchemy processing each recipient's parameters in
    Python. A Python list bound as an array is no better: psycopg dumps it element by
    element in Python (docs/benchmarks.md#the-fan-out)."""
    postgres = dialects.is_postgresql(session)
    statement = _statement(postgres, tuple(shared))
    values = {_bound(name): value for name, value in shared.items()}
    groups = _grouped(people)
    if postgres:
        people_json = json.dumps([
            {"in_app": in_app, "email_state": state,
             "email_after": after.isoformat() if after is not None else None, "users": users}
            for (in_app, state, after), users in groups.items()
        ])
        session.execute(statement, {**values, _PEOPLE: people_json})
        return
    for (in_app, state, after), users in groups.items():
        session.execute(statement, {**values, _bound("in_app"): in_app,
                                    _bound("email_state"): state, _bound("email_after"): after,
                                    _PEOPLE: json.dumps(users)})


def compile_merge(session: Session, shared: dict[str, Any]) -> None:
    """Run the merge of a batch with ``shared``'s columns for no one (nothing is written),
    so that the engine's cache holds its compiled form (:mod:`wikinotify.pipeline.warm`)."""
    postgres = dialects.is_postgresql(session)
    values = {_bound(name): value for name, value in shared.items()}
    if not postgres:  # a group's own columns
        values.update({_bound(name): None for name in PER_RECIPIENT[1:]})
    session.execute(_statement(postgres, tuple(shared)), {**values, _PEOPLE: "[]"})


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
    # Not while a "mark all read" is being placed (docs/rules.md#read-marks).
    read_marks.writing_entries(session)
    # A row a reader's "mark all read" covers reads as read but still holds the slot:
    # written read first, so the event makes a new entry (docs/rules.md#read-marks). With
    # no mark anywhere, one probe of an empty table.
    read_marks.settle_for_fanout(session, shared["group_key"], [p[0] for p in people])
    for start in range(0, len(people), WRITE_BATCH):
        _merge(session, shared, people[start : start + WRITE_BATCH])
