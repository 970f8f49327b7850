"""The demo wiki built for a test: its settings, its schema and seeded accounts."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import sqlalchemy as sa

from demo import create_app
from demo.models import db
from wikinotify.models import Base as WikiNotifyBase

#: The repository's root (the worker processes' working directory, where wsgi.py is).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


#: The seeded accounts' password hashes: scrypt took ~0.5 s a hash (x5 a test, and again
#: at each sign-in); no test is about the demo's hash strength.
HASH_METHOD = "pbkdf2:sha256:1000"


def make_app(database_url: str, **config):
    settings = {
        "TESTING": True,
        "SECRET_KEY": "test-secret",
        "SQLALCHEMY_DATABASE_URI": database_url,
        "WTF_CSRF_ENABLED": False,
        "DEMO_PASSWORD_HASH_METHOD": HASH_METHOD,
        **config,
    }
    return create_app(settings)


def seeded_app(database_url: str, **config):
    """The demo wiki with its schema built and its accounts seeded.

    On SQLite the schema and the seed are built once per test process into a file that
    each test then gets a copy of: building them took a second a test (each DDL statement
    and commit a sync to disk), copying the file a millisecond, and the rows are the same
    (the seed reads no setting but the password hash method, which the copy is kept by).
    """
    path = database_url.removeprefix("sqlite:///")
    method = config.get("DEMO_PASSWORD_HASH_METHOD", HASH_METHOD)
    if path == database_url:
        app = make_app(database_url, **config)
        with app.app_context():
            _seed_postgresql(method)
        return app
    if method not in _SEEDED_SQLITE:
        template = os.path.join(tempfile.mkdtemp(prefix="wikinotify-seed-"), "seeded.sqlite3")
        dispose(_built_and_seeded(f"sqlite:///{template}", **config))
        atexit.register(shutil.rmtree, os.path.dirname(template), ignore_errors=True)
        _SEEDED_SQLITE[method] = template
    shutil.copyfile(_SEEDED_SQLITE[method], path)  # before the app opens it
    return make_app(database_url, **config)


#: Password hash method -> a seeded SQLite file of this process's to copy.
_SEEDED_SQLITE: dict[str, str] = {}
#: (PostgreSQL URL, password hash method) -> the SQL that writes again every row the first
#: seed there wrote (:func:`_rows_as_sql`).
_SEEDED_SQL: dict[tuple[str, str], str] = {}


def _seed_postgresql(method: str) -> None:
    """``seed()``; on a schema emptied since (each test's), the rows that seed wrote the
    first time, all sent at once: the same rows, in one round trip where an INSERT a table
    and a ``setval`` a sequence took twenty (the app fixture's median 0.177 s -> 0.154)."""
    from demo.cli import seed

    key = (db.engine.url.render_as_string(hide_password=False), method)
    tables = [*db.metadata.sorted_tables, *WikiNotifyBase.metadata.sorted_tables]
    empty = not db.session.scalar(sa.select(sa.or_(*(sa.exists().select_from(t) for t in tables))))
    if not (empty and key in _SEEDED_SQL):
        seed()
        if empty:
            _SEEDED_SQL[key] = _rows_as_sql(tables)
        return
    db.session.connection().exec_driver_sql(_SEEDED_SQL[key])
    db.session.commit()


def _rows_as_sql(tables: list[sa.Table]) -> str:
    """SQL that writes every row ``tables`` hold now into them again, and moves their ids'
    sequences past those rows. PostgreSQL writes it: each table's rows as one JSON
    literal, read back by ``json_populate_recordset`` (each value through its type's own
    text form, so bytes, times and JSON come back as they were)."""
    statements = []
    for table in tables:
        insert = db.session.scalar(sa.text(
            "SELECT format('INSERT INTO %I SELECT * FROM json_populate_recordset(NULL::%I, %L)',"
            " CAST(:name AS text), CAST(:name AS text), json_agg(t)) FROM "
            f'"{table.name}" t HAVING count(*) > 0'), {"name": table.name})
        if insert is None:
            continue
        statements.append(insert)
        if (column := table.autoincrement_column) is not None:
            statements.append(db.session.scalar(sa.text(
                "SELECT format('SELECT setval(pg_get_serial_sequence(%L, %L), %s)', "
                "CAST(:table AS text), CAST(:column AS text), max(t.{column})) "
                'FROM "{table}" t'.format(column=f'"{column.name}"', table=table.name)),
                {"table": table.name, "column": column.name}))
    # Sent through the driver, which reads "%" as a placeholder's start: "%%" is a "%".
    return ";\n".join(statements).replace("%", "%%")


def _built_and_seeded(database_url: str, **config):
    from demo.cli import seed

    app = make_app(database_url, **config)
    with app.app_context():
        if database_url.startswith("sqlite"):
            db.metadata.create_all(db.engine)
            WikiNotifyBase.metadata.create_all(db.engine)
        seed()
    return app


def dispose(app) -> None:
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


def mail_settings(smtp, **extra) -> dict:
    """Settings that send the wiki's mail to ``smtp``, from a worker process or from
    :func:`run_jobs` (Flask-Mail would suppress sending in a TESTING app)."""
    return {"MAIL_SERVER": "127.0.0.1", "MAIL_PORT": smtp.port,
            "MAIL_DEFAULT_SENDER": "Demo wiki <wiki@localhost>", "MAIL_SUPPRESS_SEND": False,
            **extra}


#: A test whose rule is not the database's (Redis's, a process's hub) runs on SQLite
#: alone: the suite's time goes where both databases tell something apart.
on_sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
