"""The demo wiki built for a test: its settings, its schema and seeded accounts."""

from __future__ import annotations

import os

from demo import create_app
from demo.models import db
from wikinotify.models import Base as WikiNotifyBase

#: The repository's root (the worker processes' working directory, where wsgi.py is).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_app(database_url: str, **config):
    settings = {
        "TESTING": True,
        "SECRET_KEY": "test-secret",
        "SQLALCHEMY_DATABASE_URI": database_url,
        "WTF_CSRF_ENABLED": False,
        # The seeded accounts' password hashes: scrypt took ~0.5 s a hash (x5 a test, and
        # again at each sign-in); no test is about the demo's hash strength.
        "DEMO_PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000",
        **config,
    }
    return create_app(settings)


def seeded_app(database_url: str, **config):
    """The demo wiki with its schema built and its accounts seeded."""
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
