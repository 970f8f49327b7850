"""The demo wiki's application, for ``flask --app wsgi``, gunicorn and the RQ workers."""

from demo import create_app

app = create_app()
