"""wikinotify's schema is an Alembic branch of its own (wikinotify/migrations/); the demo's
history (migrations/) holds the demo's tables and depends on it, and ``flask --app wsgi db
upgrade`` builds both; a wiki with its own Flask-Migrate history adopts the branch with one
line. On both databases the migrations build exactly what the models declare, the
partial indexes' predicates included (Alembic's comparison leaves those out, alembic#750).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask

import wikinotify.migrations
from demo.models import db
from wikinotify.models import metadata as wikinotify_metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKINOTIFY_TABLES = set(wikinotify_metadata.tables)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    return request.getfixturevalue("fresh_postgres_schema")


def flask_cli(database_url: str, *args: str, app: str = "wsgi", cwd: str = ROOT,
              ) -> subprocess.CompletedProcess:
    # A key of the test's own: without one the demo would keep a new one in <repo>/instance.
    env = {**os.environ, "FLASK_SQLALCHEMY_DATABASE_URI": database_url,
           "FLASK_SECRET_KEY": "test-secret"}
    env.pop("FLASK_APP", None)
    return subprocess.run(
        [sys.executable, "-m", "flask", "--app", app, *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def flask_ok(database_url: str, *args: str, **where: str) -> subprocess.CompletedProcess:
    result = flask_cli(database_url, *args, **where)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def tables(database_url: str) -> set[str]:
    engine = sa.create_engine(database_url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def index_predicates(connection: sa.Connection) -> dict[str, str | None]:
    """Every index in the current schema (Alembic's own table's aside) and its ``WHERE``,
    as the database states it (PostgreSQL normalises a predicate; SQLite keeps the
    statement that made the index)."""
    if connection.dialect.name == "postgresql":
        rows = connection.execute(sa.text(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND t.relname <> 'alembic_version'"
        ))
        return dict(rows.all())
    rows = connection.execute(sa.text(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
        "AND tbl_name <> 'alembic_version'"
    ))
    predicates: dict[str, str | None] = {}
    for name, statement in rows:
        where = re.search(r"\sWHERE\s(.*)$", statement, re.IGNORECASE | re.DOTALL)
        predicates[name] = " ".join(where.group(1).split()) if where else None
    return predicates


def declared_predicates(connection: sa.Connection, metadatas) -> dict[str, str | None]:
    """The same, for the indexes the models declare: ``create_all`` into a scratch place
    on the same server (a schema inside a transaction that is rolled back, on PostgreSQL;
    a database in memory, on SQLite), read back the same way."""
    if connection.dialect.name != "postgresql":
        engine = sa.create_engine("sqlite://")
        with engine.connect() as scratch:
            for metadata in metadatas:
                metadata.create_all(scratch)
            predicates = index_predicates(scratch)
        engine.dispose()
        return predicates
    schema = f"scratch_{uuid.uuid4().hex[:12]}"
    with connection.begin() as transaction:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        connection.execute(sa.text(f'SET LOCAL search_path TO "{schema}"'))
        for metadata in metadatas:
            metadata.create_all(connection)
        predicates = index_predicates(connection)
        transaction.rollback()
    return predicates


def assert_schema_equals_models(database_url: str, metadatas) -> None:
    """No autogenerate difference, and every index, partial or not, with the predicate the
    models give it."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, metadatas) == []
            migrated = index_predicates(connection)
            connection.rollback()
            declared = declared_predicates(connection, metadatas)
    finally:
        engine.dispose()
    partial = {
        index.name
        for metadata in metadatas
        for table in metadata.tables.values()
        for index in table.indexes
        if index.dialect_options["postgresql"]["where"] is not None
    }
    assert {name for name, where in declared.items() if where} == partial
    assert migrated == declared


def unsubscribe_secret(database_url: str) -> bytes:
    engine = sa.create_engine(database_url)
    with engine.connect() as connection:
        secret = connection.scalar(
            sa.text("SELECT unsubscribe_secret FROM wikinotify_instance_settings WHERE id = 1")
        )
    engine.dispose()
    return secret


def test_the_wikinotify_branch_alone_builds_exactly_its_models(empty_database):
    flask_ok(empty_database, "db", "upgrade", "wikinotify@head")
    assert tables(empty_database) == WIKINOTIFY_TABLES | {"alembic_version"}
    assert_schema_equals_models(empty_database, [wikinotify_metadata])
    assert len(unsubscribe_secret(empty_database)) == 32


def test_upgrade_with_no_argument_builds_the_demo_and_wikinotify_as_their_models(
    empty_database,
):
    flask_ok(empty_database, "db", "upgrade")
    assert_schema_equals_models(empty_database, [db.metadata, wikinotify_metadata])
    assert len(unsubscribe_secret(empty_database)) == 32
    # The demo's autogenerate finds nothing to do: its tables are as its models, and
    # wikinotify's are not its business.
    result = flask_ok(empty_database, "db", "check")
    assert "No new upgrade operations detected" in result.stdout + result.stderr


@pytest.mark.slow
def test_downgrade_removes_everything_and_upgrade_comes_back(empty_database):
    flask_ok(empty_database, "db", "upgrade")
    flask_ok(empty_database, "db", "downgrade", "base")
    assert tables(empty_database) <= {"alembic_version"}
    flask_ok(empty_database, "db", "upgrade")
    assert WIKINOTIFY_TABLES | set(db.metadata.tables) <= tables(empty_database)


def test_seed_runs_twice_on_the_migrated_schema(empty_database):
    flask_ok(empty_database, "db", "upgrade")
    for _ in range(2):
        flask_ok(empty_database, "demo", "seed")
    engine = sa.create_engine(empty_database)
    with engine.connect() as connection:
        users = connection.scalar(sa.text("SELECT count(*) FROM demo_users"))
    engine.dispose()
    assert users == 5


def insert_preference(database_url: str, channel: str) -> None:
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(
                "INSERT INTO wikinotify_preferences (user_id, category, channel, enabled,"
                " updated_at) VALUES ('1', 'watchedPage', :channel, true, CURRENT_TIMESTAMP)"
            ), {"channel": channel})
    finally:
        engine.dispose()


def test_a_new_channel_needs_no_migration_and_a_downgrade_forgets_it(empty_database):
    """The revision that adds webhooks and chat drops the preferences table's list of
    channels; going back restores it, keeping the preferences it allowed."""
    flask_ok(empty_database, "db", "upgrade", "wikinotify@c4a8f2e6d1b9")
    with pytest.raises(sa.exc.IntegrityError):
        insert_preference(empty_database, "webhook")
    flask_ok(empty_database, "db", "upgrade", "wikinotify@e5b1c7d9a3f2")
    insert_preference(empty_database, "webhook")
    flask_ok(empty_database, "db", "downgrade", "wikinotify@c4a8f2e6d1b9")
    engine = sa.create_engine(empty_database)
    with engine.connect() as connection:
        kept = connection.scalars(sa.text("SELECT channel FROM wikinotify_preferences")).all()
    engine.dispose()
    assert kept == []
    with pytest.raises(sa.exc.IntegrityError):
        insert_preference(empty_database, "chat")
    insert_preference(empty_database, "email")


#: A wiki that is not the demo: its own model, its own Flask-Migrate history (made by
#: `flask db init` below), and the README's one line.
HOST_WIKI = textwrap.dedent('''
    import os

    from flask import Flask
    from flask_migrate import Migrate
    from flask_sqlalchemy import SQLAlchemy

    import wikinotify.migrations

    db = SQLAlchemy()


    class Page(db.Model):
        __tablename__ = "host_pages"
        id = db.Column(db.Integer, primary_key=True)
        title = db.Column(db.String(200), nullable=False)


    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ["FLASK_SQLALCHEMY_DATABASE_URI"]
    db.init_app(app)
    Migrate(app, db)
    wikinotify.migrations.init_app(app)
''')


@pytest.mark.slow
def test_a_wiki_with_its_own_history_gets_the_branch_from_one_line(empty_database, tmp_path):
    (tmp_path / "host_wiki.py").write_text(HOST_WIKI)
    host = {"app": "host_wiki", "cwd": str(tmp_path)}
    versions = tmp_path / "migrations" / "versions"
    shipped = sorted(os.listdir(wikinotify.migrations.VERSIONS))

    flask_ok(empty_database, "db", "init", **host)
    # The wiki has no revision yet; its ordinary upgrade applies wikinotify's branch.
    flask_ok(empty_database, "db", "upgrade", **host)
    assert tables(empty_database) == WIKINOTIFY_TABLES | {"alembic_version"}

    # Its autogenerate writes its own table, in its own folder, and nothing of wikinotify's.
    flask_ok(empty_database, "db", "migrate", "-m", "pages", **host)
    (revision,) = versions.glob("*.py")
    script = revision.read_text()
    assert "host_pages" in script
    assert "wikinotify_" not in script
    assert sorted(os.listdir(wikinotify.migrations.VERSIONS)) == shipped

    flask_ok(empty_database, "db", "upgrade", **host)
    assert tables(empty_database) == WIKINOTIFY_TABLES | {"host_pages", "alembic_version"}
    # Nothing left to propose: wikinotify's tables are neither created, altered nor dropped.
    result = flask_ok(empty_database, "db", "migrate", "-m", "nothing", **host)
    assert "No changes in schema detected" in result.stderr
    assert list(versions.glob("*.py")) == [revision]

    # A revision written by hand goes on top of the wiki's own head, in its own folder.
    flask_ok(empty_database, "db", "revision", "-m", "by hand", **host)
    (by_hand,) = set(versions.glob("*.py")) - {revision}
    head = re.search(r"^revision = '(\w+)'", script, re.MULTILINE).group(1)
    assert f"down_revision = '{head}'" in by_hand.read_text()

    # wikinotify's branch comes off and back on alone (with the revision by hand); the
    # wiki's table stays.
    flask_ok(empty_database, "db", "downgrade", "wikinotify@base", **host)
    assert tables(empty_database) == {"host_pages", "alembic_version"}
    flask_ok(empty_database, "db", "upgrade", **host)
    assert tables(empty_database) == WIKINOTIFY_TABLES | {"host_pages", "alembic_version"}
    assert len(unsubscribe_secret(empty_database)) == 32


def test_init_app_says_when_flask_migrate_is_not_set_up_yet():
    with pytest.raises(RuntimeError, match=r"after Migrate\(app, db\)"):
        wikinotify.migrations.init_app(Flask(__name__))
