"""What ``bench/live.py``'s gunicorn serves: the demo wiki, configured from ``FLASK_*``
variables, plus the ceiling it is measured against: a trivial endpoint answering a small
JSON body with an ETag, conditionally, and nothing else (no session, no SQL); and the
same after the wiki's own per-request work (the host's floor under any wikinotify route)."""

from __future__ import annotations

import gc
import os
import time
from collections import Counter

from flask import jsonify, request
from flask_login import current_user

from demo import wiki
from wsgi import app  # the app as the README serves it

#: Per generation, this worker's cyclic garbage collections: how many, their seconds, the
#: longest (``/bench/gc``): a collection of the oldest generation walks every object of
#: every open stream, and stops the process meanwhile.
_collections = {generation: [0, 0.0, 0.0] for generation in range(3)}
_started: list[float] = [0.0]


def _timed(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    took = time.perf_counter() - _started[0]
    kept = _collections[info["generation"]]
    kept[0] += 1
    kept[1] += took
    kept[2] = max(kept[2], took)


gc.callbacks.append(_timed)


@app.get("/bench/gc")
def collections():
    """This worker's collections so far (its pid says which worker answered); with
    ``?types=1`` also its tracked objects by type."""
    objects = gc.get_objects()
    types = Counter(type(one).__qualname__ for one in objects) if request.args.get(
        "types") else {}
    return jsonify({"pid": os.getpid(), "objects": len(objects), "types": dict(types),
                    "collections": {str(generation): kept
                                    for generation, kept in _collections.items()}})


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
