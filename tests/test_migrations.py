"""``flask --app wsgi db upgrade`` builds the whole schema on an empty database, and the
migrations say exactly what the models say (no autogenerate diff), on both databases."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from demo.models import db
from tests.conftest import make_app
from wikinotify.models import metadata as wikinotify_metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    return request.getfixturevalue("fresh_postgres_schema")


def flask_cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    # A key of the test's own: without one the demo would keep a new one in <repo>/instance.
    env = {**os.environ, "FLASK_SQLALCHEMY_DATABASE_URI": database_url,
           "FLASK_SECRET_KEY": "test-secret"}
    return subprocess.run(
        [sys.executable, "-m", "flask", "--app", "wsgi", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


def test_upgrade_builds_a_schema_equal_to_the_models(empty_database):
    result = flask_cli(empty_database, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    app = make_app(empty_database)
    with app.app_context(), db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, [db.metadata, wikinotify_metadata])
        assert diff == []
        secret = connection.scalar(sa.text("SELECT unsubscribe_secret FROM wikinotify_settings"))
        assert len(secret) == 32
    with app.app_context():
        db.engine.dispose()


def test_downgrade_removes_everything_and_upgrade_comes_back(empty_database):
    assert flask_cli(empty_database, "db", "upgrade").returncode == 0
    result = flask_cli(empty_database, "db", "downgrade", "base")
    assert result.returncode == 0, result.stderr
    engine = sa.create_engine(empty_database)
    assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    assert flask_cli(empty_database, "db", "upgrade").returncode == 0


def test_seed_runs_twice_on_the_migrated_schema(empty_database):
    assert flask_cli(empty_database, "db", "upgrade").returncode == 0
    for _ in range(2):
        result = flask_cli(empty_database, "demo", "seed")
        assert result.returncode == 0, result.stderr
    engine = sa.create_engine(empty_database)
    with engine.connect() as connection:
        users = connection.scalar(sa.text("SELECT count(*) FROM demo_users"))
    engine.dispose()
    assert users == 5
