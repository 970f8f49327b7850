"""What ``bench/live.py``'s gunicorn serves: the demo wiki, configured from ``FLASK_*``
variables, plus the ceiling it is measured against: a trivial endpoint answering a small
JSON body with an ETag, conditionally, and nothing else (no session, no SQL); and the
same after the wiki's own per-request work (the host's floor under any wikinotify route)."""

from __future__ import annotations

from flask import jsonify, request
from flask_login import current_user

import demo
from demo import wiki

app = demo.create_app()


@app.get("/bench/trivial")
def trivial():
    response = jsonify({"unread": 0, "unreadLabel": "0"})
    response.set_etag("trivial")
    response.headers["Cache-Control"] = "private, no-cache"
    return response.make_conditional(request)


@app.get("/bench/signed-in")
def signed_in():
    """The same, after what the wiki itself does for any signed-in request before
    wikinotify runs: load the account and find the site (two queries of the host's)."""
    response = jsonify({"user": current_user.get_id(), "site": wiki.current_site().id})
    response.set_etag("signed-in")
    response.headers["Cache-Control"] = "private, no-cache"
    return response.make_conditional(request)
