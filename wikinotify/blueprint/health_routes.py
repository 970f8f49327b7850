"""Probes for load balancers, systemd and Kubernetes (docs/operating.md#health-checks):
``GET /healthz``, the process answers (no I/O at all), and ``GET /readyz``, the database
and Redis answer and the schema is at wikinotify's head, or a 503 naming what is down.

Public, with no session and no rate limit (a probe calls every few seconds from one
address); neither says more than "ok" or which of the three is down: no count, no name,
no address, no error text. Never cached: a probe must see the present.
"""

from __future__ import annotations

from flask import Response, current_app, jsonify

from .. import health
from .core import bp, unlimited

NO_STORE = "no-store"


@bp.get("/healthz")
@unlimited
def healthz() -> Response:
    """Liveness: the process serves requests. Nothing is read: a database or Redis outage
    must not make an orchestrator restart every web process."""
    response = Response("ok\n", mimetype="text/plain")
    response.headers["Cache-Control"] = NO_STORE
    return response


@bp.get("/readyz")
@unlimited
def readyz() -> Response:
    """Readiness: ``{"database": "ok", "redis": "ok", "schema": "ok"}``, 200 when all
    three are ok, else 503 with the same shape saying which is ``down``."""
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    readiness = health.readiness(current_app._get_current_object())  # type: ignore[attr-defined]
    response = jsonify(readiness.as_dict())
    response.status_code = 200 if readiness.ready else 503
    response.headers["Cache-Control"] = NO_STORE
    return response
