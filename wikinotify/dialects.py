"""The one place that picks SQL by database: the two databases wikinotify supports."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any, TypeVarTuple, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import DeclarativeBase, Session

Ts = TypeVarTuple("Ts")


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def writes_beside_reads(session: Session) -> bool:
    """Whether a second connection may write while ``session``'s reads go on, neither
    waiting for the other: PostgreSQL; SQLite only on a file in WAL mode (an in-memory
    database is private to its connection, and with a rollback journal a writer locks
    readers out). The fan-out writes a batch on a thread of its own while it decides the
    next one when this holds (:mod:`wikinotify.pipeline.batch_writer`)."""
    if is_postgresql(session):
        return True
    mode = session.execute(sa.text("PRAGMA journal_mode")).scalar()
    return str(mode).lower() == "wal"


def holds_write_lock(session: Session) -> bool:
    """Whether ``session``'s connection has written in a transaction not yet ended: on
    SQLite that holds the database's one write lock until the commit, and any other
    connection's write waits for it. (pysqlite opens a transaction only at the first
    write.) PostgreSQL locks rows, not the database: ``False``."""
    if is_postgresql(session):
        return False
    raw = session.connection().connection.dbapi_connection
    return bool(getattr(raw, "in_transaction", False))


def savepoint(session: Session) -> contextlib.AbstractContextManager[Any]:
    """A SAVEPOINT around a write wikinotify makes in the caller's transaction, on
    PostgreSQL, where a failed statement otherwise aborts that transaction and its commit
    silently becomes a rollback.

    SQLite keeps a transaction going after a failed statement, so it needs none; and
    pysqlite sends no BEGIN before a SAVEPOINT, so one opened as the transaction's first
    statement would *be* the transaction, and its release would commit the write before
    the caller had decided anything.
    """
    return session.begin_nested() if is_postgresql(session) else contextlib.nullcontext()


def write_lock(session: Session, table: sa.Table, key: str, *, shared: bool = False) -> None:
    """Take, until the session's transaction ends, the lock named by ``key``; what the
    transaction reads after it is read under it: what a caller counts of ``table`` next
    stays true until it has inserted and committed (two transactions that count and then
    insert cannot both take a last place).

    PostgreSQL: a transaction-level advisory lock, so other keys go on at once; ``shared``,
    its shared side, which any number of transactions hold together and an exclusive
    holder waits for. Advisory locks are the whole database's: the key is named within
    ``table``'s schema, so a wikinotify in another schema of the database (another wiki's,
    a test worker's) neither waits for this one nor holds it up. SQLite has one writer,
    and pysqlite sends no BEGIN before a SELECT, so a read would be made outside any
    transaction and the lock taken only by the first write, after it: a DELETE from
    ``table`` that deletes nothing opens the transaction and takes the database's write
    lock now (another transaction waits there, its busy timeout, and reads after). SQLite
    has no shared side: ``shared`` takes it whole.
    """
    if is_postgresql(session):
        take = sa.func.pg_advisory_xact_lock_shared if shared else sa.func.pg_advisory_xact_lock
        schema = sa.literal(table.schema) if table.schema else sa.func.current_schema()
        session.execute(sa.select(take(sa.func.hashtext(sa.func.concat(schema, ".", key)))))
    else:
        session.execute(sa.delete(table).where(sa.false()))


def at_most(
    session: Session, query: sa.Select[*Ts], limit: int
) -> list[sa.Row[*Ts]] | None:
    """The rows of ``query``, or ``None`` when it has more than ``limit``: one read of
    ``limit + 1`` rows, which an index in the query's order stops at whatever the table
    holds (a fan-out's reads once for its run, wikinotify.pipeline.audience.read_for_run)."""
    rows = list(session.execute(query.limit(limit + 1)))
    return None if len(rows) > limit else rows


def among(
    session: Session,
    column: sa.ColumnElement[Any] | sa.orm.QueryableAttribute[Any],
    values: Sequence[Any],
    sql_type: sa.types.TypeEngine[Any] | None = None,
) -> sa.ColumnElement[bool]:
    """``column IN values`` for a batch of ids, the ids sent as one JSON text that the
    database unpacks (``jsonb_array_elements_text``, ``json_each``). As an IN list, a
    fan-out batch was thousands of bind parameters that SQLAlchemy rendered and psycopg
    parsed on every call (and more than an older SQLite allows in one statement); as a
    bound array, psycopg dumps it element by element in Python (5,000 integer ids: 105 ms,
    against 20 ms for the JSON text). ``json.dumps`` runs in C and escapes any id.

    ``values`` are strings, or for a key that is not text its values as JSON holds them
    (integers: SQLite's ``json_each`` gives them back as integers). PostgreSQL unpacks
    text, cast to ``sql_type`` when given: a type wide enough for any value the caller
    let through (``BigInteger`` for every integer key, whose index ``int4 = int8`` still
    uses), never one that truncates (``VARCHAR(n)``) or overflows and so fails the
    statement, which would abort the caller's transaction.

    SQLite: ``column = value`` of the ids' ``json_each``, which joins the ids into the
    statement (SQLAlchemy adds ``json_each`` to its FROM), each id unique first, so that
    every row matches once, as with IN. ``IN (SELECT value FROM json_each(?))`` copied
    the ids into a temporary index before the first row was looked up: 2.2 ms of the
    3.7 that each of a fan-out batch's four reads of 5,000 ids cost
    (docs/benchmarks.md#sqlite-the-embedded-default). A join is IN only where the
    statement requires the condition of every row it returns: use it as one of the
    WHERE's AND-ed conditions, never inside OR or NOT."""
    if is_postgresql(session):
        ids = sa.bindparam(None, json.dumps(list(values)), sa.Text)
        each: sa.ColumnElement[Any] = sa.func.jsonb_array_elements_text(
            sa.cast(ids, postgresql.JSONB))
        if sql_type is not None:
            each = sa.cast(each, sql_type)
        # ARRAY(…) is evaluated once; = ANY then probes the index per id.
        return column == sa.any_(sa.func.array(sa.select(each).scalar_subquery()))
    unique = sa.bindparam(None, json.dumps(list(dict.fromkeys(values))), sa.Text)
    return column == sa.func.json_each(unique).table_valued("value").c.value


def rowcount(result: sa.Result[Any]) -> int:
    """How many rows an UPDATE or a DELETE changed. ``Session.execute`` is typed to
    return a Result, as it cannot promise a cursor for every statement; an UPDATE's or a
    DELETE's is a CursorResult, which has the count."""
    return cast(CursorResult[Any], result).rowcount


def insert(
    session: Session, table: sa.Table | type[DeclarativeBase]
) -> postgresql.Insert | sqlite.Insert:
    """``INSERT`` with ``ON CONFLICT`` support (PostgreSQL's or SQLite's)."""
    return (postgresql.insert if is_postgresql(session) else sqlite.insert)(table)


#: The database's clock, as ``UTCDateTime`` stores it: ``timestamptz`` on PostgreSQL;
#: on SQLite the naive UTC text SQLAlchemy writes (``YYYY-MM-DD HH:MM:SS.ffffff``), so
#: that a comparison of two values is a comparison of two strings of one shape
#: (``CURRENT_TIMESTAMP`` has no fraction, and would sort before any stored value of
#: the same second). SQLite's ``%f`` gives milliseconds; three zeros make microseconds.
_NOW = {
    "postgresql": "now()",
    "sqlite": "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')",
}
_NOW_PLUS = {
    "postgresql": "(now() + make_interval(secs => :{name}))",
    "sqlite": "(strftime('%Y-%m-%d %H:%M:%f', 'now', :{name} || ' seconds') || '000')",
}


def now_sql(session: Session) -> str:
    """The database's current time, as SQL text."""
    return _NOW[session.get_bind().dialect.name]


def now_plus_sql(session: Session, name: str) -> str:
    """The database's current time plus the seconds bound as ``:name`` (a float, which
    may be negative), as SQL text."""
    return _NOW_PLUS[session.get_bind().dialect.name].format(name=name)


#: What every connection to a SQLite file is set to by :func:`tune_sqlite` (the embedded
#: default: docs/operating.md#sqlite-the-embedded-default says why each).
SQLITE_PRAGMAS = (
    # Readers and the one writer no longer wait for each other (a page that polls its badge
    # while a fan-out writes), and a commit appends to the log instead of copying pages to
    # a rollback journal and back: one sync a commit instead of several.
    ("journal_mode", "WAL"),
    # With WAL, the log is synced at checkpoints, not at every commit: a power cut can lose
    # the newest commits, never the file's consistency (an application crash loses nothing).
    ("synchronous", "NORMAL"),
    # A writer waits this long (ms) for another's lock before "database is locked".
    ("busy_timeout", "5000"),
    # 16 MB of page cache (KiB when negative) rather than 2 MB: the hot part of a large
    # inbox's indexes. Per connection, and a web process may hold its pool's 15: 240 MB at
    # most, which is why not more (the file's pages are in the OS's cache besides).
    ("cache_size", "-16384"),
    # Temporary tables and sorts in memory.
    ("temp_store", "MEMORY"),
)


def tune_sqlite(engine: sa.Engine) -> None:
    """Set :data:`SQLITE_PRAGMAS` on each new connection of ``engine``, if it is SQLite's
    (else nothing). An app calls it once, for the engine wikinotify shares; ``journal_mode``
    is kept in the file itself, the others are each connection's."""
    if engine.dialect.name != "sqlite":
        return

    def pragmas(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        try:
            for name, value in SQLITE_PRAGMAS:
                cursor.execute(f"PRAGMA {name} = {value}")
        finally:
            cursor.close()

    sa.event.listen(engine, "connect", pragmas)
