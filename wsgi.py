"""The demo wiki's application, for ``flask --app wsgi``, gunicorn and the RQ workers.

Settings come from ``FLASK_*`` variables; without ``FLASK_SECRET_KEY`` every process started
here uses the key kept in ``instance/secret_key`` (made at the first start)."""

from demo import create_app

app = create_app()
