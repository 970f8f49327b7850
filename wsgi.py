"""The demo wiki's application, for ``flask --app wsgi``, gunicorn and the RQ workers.

Settings come from ``FLASK_*`` variables; without ``FLASK_SECRET_KEY`` every process started
here uses the key kept in ``instance/secret_key`` (made at the first start)."""

import gc

from demo import create_app

app = create_app()
# What importing and building the app made lives as long as the process: left out of every
# later collection of the oldest generation, which otherwise walks it each time, a pause of
# every request the process serves meanwhile (docs/operating.md#serving-many-open-streams).
gc.freeze()
