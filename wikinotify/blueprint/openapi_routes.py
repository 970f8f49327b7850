"""``GET /api/openapi.json``: the JSON API's own description (see ``wikinotify.openapi``)."""

from __future__ import annotations

from flask import current_app, jsonify, request
from flask.typing import ResponseReturnValue

from ..openapi import build_spec, operation
from ..state import state
from .core import api_login_required, bp


@bp.get("/api/openapi.json")
@operation(
    summary="This document",
    ok={200: ("The OpenAPI 3.1 description of this API.", {"type": "object"})},
    errors=(401,),
)
@api_login_required
def api_openapi() -> ResponseReturnValue:
    """Built for this wiki on each request: its category keys and site ids are part of
    it, and building it is cheap next to the round trip."""
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    return jsonify(build_spec(app, state(), server_url=request.script_root or "/"))
