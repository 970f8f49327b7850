"""The test databases: PostgreSQL schemas of a session's own, the connections a test may
cut, emptying the tables, and a database that refuses one account's entries."""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from demo.models import db
from wikinotify.models import Base as WikiNotifyBase

PG_ENV = "WIKINOTIFY_TEST_DATABASE_URL"


REDIS_ENV = "WIKINOTIFY_TEST_REDIS_URL"


def postgres_base_url() -> str | None:
    """The PostgreSQL URL from the environment, with the psycopg 3 driver."""
    url = os.environ.get(PG_ENV)
    if not url:
        return None
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def url_in_schema(base_url: str, schema: str) -> str:
    """``base_url`` with every connection's ``search_path`` set to ``schema``."""
    url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


class PostgresSchema:
    """A schema of this test session's own on the test server."""

    def __init__(self, base_url: str, name: str) -> None:
        self.base_url = base_url
        self.name = name
        self.engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")

    def create(self) -> str:
        with self.engine.connect() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE'))
            conn.execute(sa.text(f'CREATE SCHEMA "{self.name}"'))
        return url_in_schema(self.base_url, self.name)

    def drop(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE'))
        self.engine.dispose()


def postgres_or_skip() -> str:
    """The PostgreSQL URL, or a skip that says why (a failure where CI requires it)."""
    give_up = pytest.fail if os.environ.get("WIKINOTIFY_TEST_REQUIRE_POSTGRES") else pytest.skip
    base_url = postgres_base_url()
    if base_url is None:
        give_up(f"PostgreSQL leg skipped: {PG_ENV} is not set (.ci/run sets it)")
    try:
        engine = sa.create_engine(base_url)
        with engine.connect():
            pass
        engine.dispose()
    except sa.exc.OperationalError as error:
        give_up(f"PostgreSQL leg skipped: {PG_ENV} is not reachable ({error.orig})")
    return base_url


def named_database_url(url: str, name: str) -> str:
    """``url`` whose connections show as ``application_name = name`` in
    ``pg_stat_activity``: a test cuts its own connections, never another test's."""
    named = make_url(url).update_query_dict({"application_name": name})
    return named.render_as_string(hide_password=False)


def _admin_engine() -> sa.Engine:
    return sa.create_engine(postgres_base_url(), isolation_level="AUTOCOMMIT")


def connections_named(name: str) -> list[int]:
    """The server pids of the open connections named ``name``."""
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :n")
            return list(conn.scalars(query, {"n": name}))
    finally:
        engine.dispose()


def terminate_connections(name: str) -> int:
    """``pg_terminate_backend`` on every connection named ``name``; how many there were."""
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = :n")
            return conn.scalar(query, {"n": name})
    finally:
        engine.dispose()


def empty_everything(url: str) -> None:
    """Every table of the schema at ``url`` emptied and its ids restarted, as a fresh
    schema has them. DELETEs, dependents first, in one round trip: on these few rows they
    took 0.03 s where a TRUNCATE of the 24 tables took 0.35 (it makes new files)."""
    engine = _emptying_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(_emptying_sql(url))


@functools.cache
def _emptying_engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


@functools.cache
def _emptying_sql(url: str) -> str:
    tables = [*reversed(WikiNotifyBase.metadata.sorted_tables),
              *reversed(db.metadata.sorted_tables)]
    with _emptying_engine(url).connect() as conn:
        sequences = conn.scalars(sa.text("SELECT sequence_name FROM information_schema.sequences "
                                         "WHERE sequence_schema = current_schema()"))
        restarts = [f'ALTER SEQUENCE "{name}" RESTART' for name in sequences]
    return "; ".join([*(f'DELETE FROM "{t.name}"' for t in tables), *restarts])


_REFUSE_POSTGRESQL = (
    "CREATE FUNCTION wikinotify_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN IF NEW.user_id = '{user}' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
    "RETURN NEW; END $$",
    "CREATE TRIGGER wikinotify_test_refuse BEFORE {write} ON wikinotify_notifications "
    "FOR EACH ROW EXECUTE FUNCTION wikinotify_test_refuse()",
)


_REFUSE_SQLITE = (
    "CREATE TRIGGER wikinotify_test_refuse BEFORE {write} ON wikinotify_notifications "
    "WHEN NEW.user_id = '{user}' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
)


_ALLOW = {
    "postgresql": ("DROP TRIGGER wikinotify_test_refuse ON wikinotify_notifications",
                   "DROP FUNCTION wikinotify_test_refuse()"),
    "sqlite": ("DROP TRIGGER wikinotify_test_refuse",),
}


def _database_runs(statements) -> None:
    for statement in statements:
        db.session.execute(sa.text(statement))
    db.session.commit()


@contextmanager
def statements_sent(engine: sa.Engine):
    """Every statement ``engine`` sends meanwhile, with its parameters, as a list of
    ``(statement, parameters)`` filled in as they go."""
    statements: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, *rest) -> None:
        statements.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


@contextmanager
def entries_refused_for(user_id: str, write: str = "INSERT"):
    """The database refuses to write (``write``: ``INSERT`` or ``UPDATE``) ``user_id``'s
    entries (a trigger), until the block ends: the batch that holds one fails, as on a
    real error."""
    dialect = db.engine.dialect.name
    refuse = _REFUSE_POSTGRESQL if dialect == "postgresql" else _REFUSE_SQLITE
    _database_runs(s.replace("{user}", user_id).replace("{write}", write) for s in refuse)
    try:
        yield
    finally:
        _database_runs(_ALLOW[dialect])


def stamp(app, *revisions: str) -> None:
    """The app's database's ``alembic_version`` holds ``revisions`` (none: no such table),
    as ``flask db stamp`` writes it; the test databases are built with create_all."""
    with app.app_context(), db.engine.begin() as connection:
        connection.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
        if not revisions:
            return
        connection.execute(sa.text(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        for revision in revisions:
            connection.execute(sa.text("INSERT INTO alembic_version VALUES (:revision)"),
                               {"revision": revision})
