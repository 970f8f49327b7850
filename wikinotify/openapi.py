"""The JSON API described as an OpenAPI 3.1 document, built with apispec from the
marshmallow schemas that the routes themselves load and dump.

What the schemas cannot say (which statuses, which errors, the path and query
parameters, the words) each route says beside itself, with ``@operation(...)`` under its
``@bp.get`` (or ``put``...); the builder walks the app's views for them. A test fails
when a route under ``/api/`` carries none.

The document is built per request (a few milliseconds): two bodies depend on the wiki
it describes, the preferences PUT on the category keys and the admin settings PUT on
the site ids, so nothing is cached across apps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from apispec.ext.marshmallow.openapi import OpenAPIConverter
from apispec_webframeworks.flask import FlaskPlugin
from flask import Flask
from marshmallow import Schema, fields

from . import ratelimit, schemas
from .schemas import administration
from .state import State

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
#: The security schemes: the host wiki's signed-in session cookie, and the CSRF token
#: an API write carries in a header (or it sends its body as JSON, which no other origin
#: can without a CORS preflight).
SESSION = "session"
CSRF = "csrf"
WRITE_METHODS = ("put", "post", "patch", "delete")

View = TypeVar("View", bound=Callable[..., Any])

#: The error responses, by status; each body is ``ErrorSchema``.
ERRORS: dict[int, str] = {
    400: "The request is refused; `error.code` says why (`invalid` names the fields in "
    "`error.fields`, `csrf` a write without a JSON body or an `X-CSRFToken` header).",
    401: "Not signed in (`unauthorized`).",
    403: "Signed in, but not an administrator (`forbidden`).",
    404: "No such notification among the caller's own (`not_found`).",
    413: "The body is over 64 kB (`request_entity_too_large`).",
    409: "The request conflicts with the resource's state; `error.code` says which.",
    415: "A body that is not `application/json` (`unsupported_media_type`).",
}

#: The 429 of an operation over its rate limit (:mod:`wikinotify.ratelimit`).
RATE_LIMITED = ("Too many such calls by the caller in a short time (`rate_limited`): "
                "nothing was done. `Retry-After` says how many seconds to wait.")
RETRY_AFTER = {"schema": {"type": "integer", "minimum": 1},
               "description": "Seconds until the call is accepted again."}

#: The errors every write under ``/api/`` can answer, on top of its own.
WRITE_ERRORS = (400, 401, 413, 415)


def path_id(name: str, description: str) -> dict[str, Any]:
    """An integer id in the path; ``description`` says what answers for a wrong one."""
    return {"in": "path", "name": name, "required": True, "description": description,
            "schema": {"type": "integer"}}


#: ``?cursor=`` of a keyset-paginated list.
CURSOR = {"in": "query", "name": "cursor", "required": False,
          "description": "A `nextCursor` this API gave out; any other value is a 400.",
          "schema": {"type": "string"}}

#: A body's schema: a schema class, or a function of the app's state giving a schema
#: instance (a body that lists the wiki's category keys or site ids).
Body = type[Schema] | Callable[[State], Schema]


def per_category(factory: Callable[[tuple[str, ...]], Schema]) -> Body:
    """The body ``factory`` makes for the wiki's category keys: the document lists them."""
    return lambda st: factory(tuple(st.registry))


@dataclass(frozen=True)
class Operation:
    """One route's OpenAPI operation, declared beside the route with :func:`operation`.

    ``ok`` maps each success status to its description and body schema (``None``: no
    body); ``errors`` lists the error statuses (each answered with ``ErrorSchema``, in
    the words of :data:`ERRORS` unless ``error_text`` has the route's own);
    ``plain_errors`` are body-less ones; ``headers`` names each status's headers.
    ``security`` replaces the default (``[]``: public). ``form`` is the JSON Schema of a
    form body, for a route that is posted to by something other than a script.
    """

    summary: str
    ok: Mapping[int, tuple[str, Any]]
    description: str | None = None
    parameters: Sequence[Mapping[str, Any]] = ()
    body: Body | None = None
    body_required: bool = True
    form: Mapping[str, Any] | None = None
    headers: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    error_text: Mapping[int, str] = field(default_factory=dict)
    plain_errors: Mapping[int, str] = field(default_factory=dict)
    security: list[dict[str, list[str]]] | None = None

    def __call__(self, view: View) -> View:
        """Mark ``view`` as described by this operation."""
        _described[view] = self
        return view


#: ``@operation(summary=..., ok={...}, errors=(...), ...)``, right under the route's
#: ``@bp.get`` (or ``put``...), so it marks the view Flask registers: the route's own
#: description, which :func:`build_spec` reads. Its keywords are :class:`Operation`'s.
operation = Operation

#: Every view that carries an operation; the document is built from the ones an app has.
_described: dict[Callable[..., Any], Operation] = {}


def described_views() -> dict[Callable[..., Any], Operation]:
    """Every view marked with :func:`operation`, whichever app registers it."""
    return dict(_described)


def described(app: Flask) -> dict[str, Operation]:
    """``app``'s wikinotify endpoints that carry an operation, with it."""
    return {endpoint: _described[view] for endpoint, view in app.view_functions.items()
            if endpoint.startswith("wikinotify.") and view in _described}


def _site_switches(
    converter: OpenAPIConverter, declared: fields.Field[Any], ret: dict[str, Any],
    **kwargs: Any
) -> dict[str, Any]:
    """apispec attribute function: what ``SiteSwitchList`` checks in code, as JSON Schema.

    Each item names one of the wiki's sites (an ``enum`` of their ids), and each site at
    most once (``maxContains``), so a body the document calls valid is one the API takes.
    """
    if not isinstance(declared, administration.SiteSwitchList):
        return {}
    site_ids = sorted(declared.site_ids)
    item = converter.schema2jsonschema(administration.AdminSiteUpdateSchema)
    item["properties"]["id"] = {"type": "string", "enum": site_ids}
    once = [{"contains": {"properties": {"id": {"const": site_id}}}, "minContains": 0,
             "maxContains": 1} for site_id in site_ids]
    return {"items": item, "maxItems": len(site_ids), "allOf": once}


def _content(schema: Any, media_type: str = JSON) -> dict[str, Any]:
    return {"content": {media_type: {"schema": schema}}}


def _header(name: str) -> dict[str, Any]:
    return {"schema": {"type": "string"}, "description": f"The `{name}` of the answer."}


def _responses(op: Operation, limited: bool) -> dict[int, dict[str, Any]]:
    """The success responses, then the JSON errors (a rate limit's 429 where ``limited``),
    then the body-less ones."""
    responses: dict[int, dict[str, Any]] = {}
    if limited:
        responses[429] = {"description": RATE_LIMITED, **_content("Error"),
                          "headers": {"Retry-After": RETRY_AFTER}}
    for status, (description, schema) in op.ok.items():
        responses[status] = {"description": description}
        if schema is not None:
            responses[status].update(_content(schema))
        names = op.headers.get(status, ())
        if names:
            responses[status]["headers"] = {name: _header(name) for name in names}
    for status in op.errors:
        description = op.error_text.get(status, ERRORS[status])
        responses[status] = {"description": description, **_content("Error")}
    for status, description in op.plain_errors.items():
        responses[status] = {"description": description}
    return dict(sorted(responses.items()))


def _operation(
    endpoint: str, method: str, op: Operation, st: State, *, limited: bool
) -> dict[str, Any]:
    """One operation object; its ``operationId`` is the view's name."""
    entry: dict[str, Any] = {
        "operationId": endpoint.removeprefix("wikinotify."),
        "summary": op.summary,
        "responses": _responses(op, limited),
    }
    if method in WRITE_METHODS:
        entry["security"] = [{SESSION: [], CSRF: []}]
    if op.description is not None:
        entry["description"] = op.description
    if op.parameters:
        entry["parameters"] = [dict(parameter) for parameter in op.parameters]
    if op.security is not None:
        entry["security"] = op.security
    body = op.body
    if body is not None:
        schema = body if isinstance(body, type) else body(st)
        entry["requestBody"] = {"required": op.body_required, **_content(schema)}
    if op.form is not None:
        entry["requestBody"] = {"required": True, **_content(dict(op.form), FORM)}
    return entry


def api_endpoints(app: Flask) -> set[str]:
    """The endpoints of every rule under the blueprint's ``/api/``."""
    return {rule.endpoint for rule in app.url_map.iter_rules()
            if rule.endpoint.startswith("wikinotify.") and "/api/" in rule.rule}


def build_spec(app: Flask, st: State, *, server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI document of ``app``'s wikinotify API, as a dict ready for JSON."""
    marshmallow = MarshmallowPlugin()
    spec = APISpec(
        title="wikinotify",
        version="1",
        openapi_version=OPENAPI_VERSION,
        plugins=[FlaskPlugin(), marshmallow],
        info={"description": "The notification inbox, preferences and administration "
              "of this wiki. Errors are `{\"error\": {\"code\", \"message\", \"fields\"?}}`."},
        servers=[{"url": server_url}],
        security=[{SESSION: []}],
    )
    assert marshmallow.converter is not None  # APISpec gave the plugin its converter
    marshmallow.converter.add_attribute_function(_site_switches)
    spec.components.security_scheme(SESSION, {
        "type": "apiKey",
        "in": "cookie",
        "name": app.config["SESSION_COOKIE_NAME"],
        "description": "The wiki's own sign-in session.",
    })
    spec.components.security_scheme(CSRF, {
        "type": "apiKey",
        "in": "header",
        "name": "X-CSRFToken",
        "description": "The CSRF token of the wiki's pages (Flask-WTF's `csrf_token()`). "
        "An API write needs it, unless its body is sent as `application/json`.",
    })
    spec.components.schema("Error", schema=schemas.ErrorSchema)
    for rule in app.url_map.iter_rules():
        view = app.view_functions.get(rule.endpoint)
        op = _described.get(view) if view is not None else None
        if op is None or not rule.endpoint.startswith("wikinotify."):
            continue  # not wikinotify's, or a page (only the API and unsubscribe are described)
        limited = bool(ratelimit.limited_by(view))
        operations = {method: _operation(rule.endpoint, method, op, st, limited=limited)
                      for method in sorted(m.lower() for m in rule.methods or ())
                      if method not in ("head", "options")}
        spec.path(view=view, app=app, operations=operations)
    return spec.to_dict()
