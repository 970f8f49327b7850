"""The JSON API described as an OpenAPI 3.1 document, built with apispec from the
marshmallow schemas that the routes themselves load and dump.

What the schemas cannot say (which statuses, which errors, the path and query
parameters, the words) is in ``OPERATIONS``, one table keyed by endpoint name, so a
route module never changes for its description. A test fails when a route under
``/api/`` has no entry here.

The document is built per request (a few milliseconds): two bodies depend on the wiki
it describes, the preferences PUT on the category keys and the admin settings PUT on
the site ids, so nothing is cached across apps.
"""

from __future__ import annotations

from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from apispec.ext.marshmallow.openapi import OpenAPIConverter
from apispec_webframeworks.flask import FlaskPlugin
from flask import Flask
from marshmallow import Schema, fields

from . import ratelimit, schemas
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

_ENTRY_ID = {
    "in": "path",
    "name": "entry_id",
    "required": True,
    "description": "An inbox entry's id. Any other caller's id, or anything that is not "
    "an id, answers 404 exactly as a missing one.",
    "schema": {"type": "integer"},
}

_EVENT_ID = {
    "in": "path",
    "name": "event_id",
    "required": True,
    "description": "A failed event's id. The id of an event that has not failed, or "
    "anything that is not an id, answers 404 exactly as a missing one.",
    "schema": {"type": "integer"},
}


_ENDPOINT_ID = {
    "in": "path",
    "name": "endpoint_id",
    "required": True,
    "description": "An endpoint's id. Another user's endpoint (or, for anyone but an "
    "administrator, a site-wide one), or anything that is not an id, answers 404 exactly "
    "as a missing one.",
    "schema": {"type": "integer"},
}

_ENDPOINT_404 = {404: "No such endpoint among the caller's own (`not_found`)."}

#: A new webhook or chat target refused for its owner's cap.
_ENDPOINT_CAP = {409: "The owner (the site, for a site-wide webhook) already has the most "
                 "webhooks and chat targets together that `WIKINOTIFY_ENDPOINTS_PER_ACCOUNT` "
                 "allows (`too_many_endpoints`)."}

#: What a webhook or chat save may refuse with a 400 beyond its schema: the SSRF guard.
_SSRF_TEXT = (
    " The URL is checked when saved, after DNS resolution: one whose host resolves to a "
    "loopback, private, link-local, multicast, unspecified or reserved address (IPv6 and "
    "IPv4-mapped ones included) is a 400 whose message says why, unless the operator's "
    "`WIKINOTIFY_OUTBOUND_ALLOW` names it."
)


def _preferences_body(st: State) -> Schema:
    return schemas.preferences_update_schema(tuple(st.registry))


def _webhook_create_body(st: State) -> Schema:
    return schemas.webhook_create_schema(tuple(st.registry))


def _webhook_update_body(st: State) -> Schema:
    return schemas.webhook_update_schema(tuple(st.registry))


def _chat_create_body(st: State) -> Schema:
    return schemas.chat_create_schema(tuple(st.registry))


def _admin_settings_body(st: State) -> Schema:
    return schemas.admin_settings_update_schema(tuple(site.id for site in st.host.sites()))


#: Every JSON API operation, keyed by endpoint. ``body`` is a schema class, or a
#: function of the app's state giving a schema; ``ok`` maps each success status to its
#: description and body schema (``None``: no body); ``errors`` lists the error statuses
#: (each answered with ``ErrorSchema``).
OPERATIONS: dict[str, dict[str, Any]] = {
    "wikinotify.api_list": {
        "method": "get",
        "summary": "One page of the caller's inbox, newest activity first",
        "description": "Thirty entries per page, keyset-paginated: pass `nextCursor` back "
        "as `cursor` for the next page; `nextCursor` is null on the last page. Entries of "
        "the current site and instance-wide ones.",
        "parameters": [
            {"in": "query", "name": "cursor", "required": False,
             "description": "A `nextCursor` this API gave out; any other value is a 400.",
             "schema": {"type": "string"}},
            {"in": "query", "name": "unread", "required": False,
             "description": "Only unread entries.", "schema": {"type": "boolean"}},
        ],
        "ok": {200: ("A page of entries.", schemas.NotificationPageSchema)},
        "errors": (400, 401, 404),
        "error_text": {404: "Notifications are switched off on the current site: the "
                       "inbox answers as a route that does not exist (`not_found`)."},
    },
    "wikinotify.api_summary": {
        "method": "get",
        "summary": "The unread badge",
        "description": "Counted from at most 100 entries (`unreadLabel` says `99+` past "
        "99). `unseen` counts the unread entries created or updated since the caller last "
        "opened the bell menu or the inbox (the badge's number). Send the last `ETag` as "
        "`If-None-Match`: an unchanged badge is a 304. `GET /stream` (Server-Sent "
        "Events, outside this API) pushes the same body on every change.",
        "parameters": [
            {"in": "header", "name": "If-None-Match", "required": False,
             "schema": {"type": "string"}},
        ],
        "ok": {
            200: ("The badge.", schemas.SummarySchema),
            304: ("Unchanged since the `ETag` sent in `If-None-Match`.", None),
        },
        "headers": {200: ("ETag", "Cache-Control"), 304: ("ETag",)},
        "errors": (401,),
    },
    "wikinotify.api_mark_read": {
        "method": "put",
        "summary": "Mark one entry read",
        "description": "Reading an entry also cancels its pending email.",
        "parameters": [_ENTRY_ID],
        "ok": {204: ("Marked read (or it already was).", None)},
        "errors": (*WRITE_ERRORS, 404),
    },
    "wikinotify.api_mark_all_read": {
        "method": "put",
        "summary": "Mark every entry read, or one page's",
        "description": "No body, or `{}`, marks every unread entry of the current site "
        "read; `{\"pageId\": ...}` only that page's. Any other body is a 400 and marks "
        "nothing.",
        "body": schemas.MarkReadSchema,
        "body_required": False,
        "ok": {200: ("How many entries were marked.", schemas.MarkedSchema)},
        "errors": WRITE_ERRORS,
    },
    "wikinotify.api_dismiss": {
        "method": "delete",
        "summary": "Dismiss one entry",
        "parameters": [_ENTRY_ID],
        "ok": {204: ("Dismissed.", None)},
        "errors": (*WRITE_ERRORS, 404),
    },
    "wikinotify.api_seen": {
        "method": "put",
        "summary": "Mark the inbox seen",
        "description": "Stamps the caller's seen time (the bell menu was opened): "
        "`unseen` in the summary counts from it. No body, or a JSON one (ignored).",
        "body_required": False,
        "ok": {204: ("Seen.", None)},
        "errors": WRITE_ERRORS,
    },
    "wikinotify.api_mutes": {
        "method": "get",
        "summary": "The caller's mutes",
        "description": "Pages and people the caller muted, newest first: a muted page tells "
        "the caller nothing from any category, a muted person's actions tell the caller "
        "nothing. `name` is the page's title (null where the caller may no longer read "
        "it) or the person's name.",
        "ok": {200: ("The mutes.", schemas.MutesSchema)},
        "errors": (401,),
    },
    "wikinotify.api_mute": {
        "method": "put",
        "summary": "Mute a page or a person",
        "description": "Muting twice is muting once. Mail still waiting for the caller's "
        "unread entries about that page or person is cancelled.",
        "body": schemas.MuteRequestSchema,
        "ok": {204: ("Muted.", None)},
        "errors": (*WRITE_ERRORS, 404),
        "error_text": {404: "The wiki has no such page or person, or the caller may not "
                       "read the page (`not_found`): a hidden page answers exactly as a "
                       "missing one."},
    },
    "wikinotify.api_unmute": {
        "method": "delete",
        "summary": "Unmute a page or a person",
        "parameters": [
            {"in": "path", "name": "kind", "required": True,
             "schema": {"type": "string", "enum": ["page", "user"]}},
            {"in": "path", "name": "target_id", "required": True,
             "description": "The page's or the person's id.", "schema": {"type": "string"}},
        ],
        "ok": {204: ("Unmuted.", None)},
        "errors": (*WRITE_ERRORS, 404),
        "error_text": {404: "The caller has no such mute (`not_found`): someone else's "
                       "answers exactly as one that does not exist."},
    },
    "wikinotify.get_preferences": {
        "method": "get",
        "summary": "The caller's preferences",
        "description": "Every category the caller may see, with its channels and "
        "defaults, and the email schedule. `channels` lists the grid's columns: `inApp`, "
        "`email`, then `webhook` and `chat` where the caller has an endpoint of that kind "
        "(a webhook waiting for verification counts); each category has a key per column.",
        "ok": {200: ("The preferences.", schemas.PreferencesSchema)},
        "errors": (401,),
    },
    "wikinotify.put_preferences": {
        "method": "put",
        "summary": "Replace the caller's preferences",
        "description": "The full map: every category, with `inApp` and `email`, and "
        "`webhook` or `chat` where the caller set one up (left out, they stay as they are); "
        "and, optionally, "
        "`emailSchedule` (left out, the schedule stays as it is). Its `hour` and `weekday` "
        "are JSON integers written without a fraction (`9.0` is refused), its `timezone` "
        "an IANA name (`Europe/Paris`) or null for the account's. A refused body stores "
        "nothing; the 400 names the field.",
        "body": _preferences_body,
        "ok": {200: ("The preferences as stored.", schemas.PreferencesSchema)},
        "errors": WRITE_ERRORS,
    },
    "wikinotify.get_admin_settings": {
        "method": "get",
        "summary": "Instance settings, site switches and delivery status (administrators)",
        "ok": {200: ("The settings and `status`.", schemas.AdminSettingsSchema)},
        "errors": (401, 403),
    },
    "wikinotify.put_admin_settings": {
        "method": "put",
        "summary": "Save the instance settings and site switches (administrators)",
        "description": "The three settings are required, each a JSON integer written "
        "without a fraction (`100.0` is refused); `sites` lists the switches to change, "
        "each site at most once. A refused body stores nothing; the 400 names the field.",
        "body": _admin_settings_body,
        "ok": {200: ("The settings as stored (without `status`).",
                     schemas.AdminSettingsSchema)},
        "errors": (*WRITE_ERRORS, 403),
    },
    "wikinotify.api_retry_event": {
        "method": "post",
        "summary": "Retry a failed event (administrators)",
        "description": "An event whose fan-out failed on every attempt (a dead letter, "
        "listed in the status's `failedEvents`) gets its attempts back and is fanned out "
        "again, from where it stopped. No body is needed.",
        "parameters": [_EVENT_ID],
        "ok": {204: ("The event waits for the next fan-out.", None)},
        "errors": (*WRITE_ERRORS, 403, 404),
        "error_text": {404: "No failed event has this id (`not_found`)."},
    },
    "wikinotify.list_webhooks": {
        "method": "get",
        "summary": "The caller's webhook endpoints, or the site's",
        "description": "`?scope=user` (the default): the caller's own, told of her own "
        "notifications as a channel beside in-app and email. `?scope=site`: the site-wide "
        "ones, told of events by category (administrators only). Never a signing secret.",
        "parameters": [
            {"in": "query", "name": "scope", "required": False,
             "schema": {"type": "string", "enum": list(schemas.ENDPOINT_SCOPES)}},
        ],
        "ok": {200: ("The endpoints, oldest first.", schemas.WebhooksSchema)},
        "errors": (400, 401, 403),
    },
    "wikinotify.create_webhook_api": {
        "method": "post",
        "summary": "Add a webhook endpoint",
        "description": "`url` and `categories` (keys the owner may choose); `scope: site` "
        "for a site-wide endpoint (administrators; `siteId` narrows it to one site). The "
        "answer carries the signing secret (`whsec_...`), shown this once. The endpoint "
        "starts `unverified`: it is sent a signed `webhook.verification` event whose data "
        "holds a `challenge`, and becomes `active` when it answers 2xx with the JSON body "
        "`{\"challenge\": <the same>}`. Until then nothing else is sent to it." + _SSRF_TEXT,
        "body": _webhook_create_body,
        "ok": {201: ("The endpoint and its secret (`Cache-Control: no-store`).",
                     schemas.WebhookSecretSchema)},
        "headers": {201: ("Cache-Control",)},
        "errors": (*WRITE_ERRORS, 403, 409),
        "error_text": _ENDPOINT_CAP,
    },
    "wikinotify.update_webhook": {
        "method": "patch",
        "summary": "Change a webhook endpoint",
        "description": "What is left out stays. A new `url` must be verified again, and "
        "the deliveries waiting for the old one are cancelled; `enabled: false` disables "
        "the endpoint and cancels what waits (enabling it does not replay that)."
        + _SSRF_TEXT,
        "parameters": [_ENDPOINT_ID],
        "body": _webhook_update_body,
        "ok": {200: ("The endpoint as stored.", schemas.WebhookSchema)},
        "errors": (*WRITE_ERRORS, 404),
        "error_text": _ENDPOINT_404,
    },
    "wikinotify.delete_webhook": {
        "method": "delete",
        "summary": "Delete a webhook endpoint and its deliveries",
        "parameters": [_ENDPOINT_ID],
        "ok": {204: ("Deleted.", None)},
        "errors": (*WRITE_ERRORS, 404),
        "error_text": _ENDPOINT_404,
    },
    "wikinotify.rotate_webhook_secret": {
        "method": "post",
        "summary": "Rotate a webhook's signing secret",
        "description": "A new secret, shown this once. For 24 hours (`previousSecretUntil`) "
        "every request carries a second signature made with the old secret, so a receiver "
        "can switch without dropping a delivery. One previous secret is kept: while it "
        "still signs, another rotation is a 409 (`rotation_pending`, naming when it ends), "
        "so a receiver is never left with no secret it knows. No body is needed.",
        "parameters": [_ENDPOINT_ID],
        "ok": {200: ("The endpoint and its new secret (`Cache-Control: no-store`).",
                     schemas.WebhookSecretSchema)},
        "headers": {200: ("Cache-Control",)},
        "errors": (*WRITE_ERRORS, 404, 409),
        "error_text": {**_ENDPOINT_404,
                       409: "The previous secret still signs (`rotation_pending`)."},
    },
    "wikinotify.test_webhook": {
        "method": "post",
        "summary": "Send a test event",
        "description": "An active endpoint is sent a signed `webhook.test` event; an "
        "unverified one its verification event again. At most one test waits per "
        "endpoint: asked again before it went, the answer is the one waiting. No body is "
        "needed.",
        "parameters": [_ENDPOINT_ID],
        "ok": {202: ("The delivery, queued.", schemas.DeliverySchema)},
        "errors": (*WRITE_ERRORS, 404, 409),
        "error_text": {**_ENDPOINT_404, 409: "The endpoint is disabled (`disabled`)."},
    },
    "wikinotify.webhook_deliveries": {
        "method": "get",
        "summary": "A webhook's deliveries, newest first",
        "description": "Fifty per page, keyset-paginated: pass `nextCursor` back as "
        "`cursor`. Each shows its state, attempts, the last response code and latency, and "
        "the class of its last failure (`transient`, `rate_limit`, `permanent`, `gone`, "
        "`blocked`, `ineligible`).",
        "parameters": [
            _ENDPOINT_ID,
            {"in": "query", "name": "cursor", "required": False,
             "description": "A `nextCursor` this API gave out; any other value is a 400.",
             "schema": {"type": "string"}},
        ],
        "ok": {200: ("A page of deliveries.", schemas.DeliveryPageSchema)},
        "errors": (400, 401, 404),
        "error_text": _ENDPOINT_404,
    },
    "wikinotify.list_chat": {
        "method": "get",
        "summary": "The caller's chat targets",
        "description": "Each target shows Apprise's masked form of its URL, never the URL.",
        "ok": {200: ("The chat targets, oldest first.", schemas.ChatTargetsSchema)},
        "errors": (401,),
    },
    "wikinotify.create_chat_api": {
        "method": "post",
        "summary": "Add a chat target",
        "description": "`url` is an Apprise URL (Telegram, Slack, Matrix, Discord, ntfy, "
        "Mattermost...). It is stored encrypted and never returned: the answer shows its "
        "masked form. `categories` left out: every category the caller may see (the chat "
        "column of her preferences then chooses). Refused with a 400: generic targets "
        "(`json://`, `xml://`, `form://`: add a webhook instead), headers or fields set "
        "through parameters (`+X=`, `-x=`, `:x=`), `method=`, and any parameter off the "
        "allow-list, such as one naming a local file (`template=`)." + _SSRF_TEXT,
        "body": _chat_create_body,
        "ok": {201: ("The chat target.", schemas.ChatTargetSchema)},
        "errors": (*WRITE_ERRORS, 409),
        "error_text": _ENDPOINT_CAP,
    },
    "wikinotify.delete_chat": {
        "method": "delete",
        "summary": "Delete a chat target and its deliveries",
        "parameters": [_ENDPOINT_ID],
        "ok": {204: ("Deleted.", None)},
        "errors": (*WRITE_ERRORS, 404),
        "error_text": _ENDPOINT_404,
    },
    "wikinotify.test_chat": {
        "method": "post",
        "summary": "Send a test chat message",
        "parameters": [_ENDPOINT_ID],
        "ok": {202: ("The delivery, queued.", schemas.DeliverySchema)},
        "errors": (*WRITE_ERRORS, 404, 409),
        "error_text": {**_ENDPOINT_404, 409: "The target is disabled (`disabled`)."},
    },
    "wikinotify.api_openapi": {
        "method": "get",
        "summary": "This document",
        "ok": {200: ("The OpenAPI 3.1 description of this API.", {"type": "object"})},
        "errors": (401,),
    },
}

#: Routes outside ``/api/`` that the document describes too: the RFC 8058 one-click
#: unsubscribe, which a mail client POSTs with no session.
PUBLIC_OPERATIONS: dict[str, dict[str, Any]] = {
    "wikinotify.unsubscribe": {
        "method": "post",
        "summary": "RFC 8058 one-click unsubscribe",
        "description": "Public: no session, no CSRF token. The signed token `t` comes in "
        "the query (as in the mail's `List-Unsubscribe` URL) or in the form. Turns email "
        "off for the token's categories and answers 200 with an empty body; idempotent.",
        "security": [],
        "parameters": [
            {"in": "query", "name": "t", "required": False,
             "description": "The token from the mail's `List-Unsubscribe` URL.",
             "schema": {"type": "string"}},
        ],
        "form": {
            "type": "object",
            "properties": {
                "List-Unsubscribe": {"type": "string", "enum": ["One-Click"]},
                "t": {"type": "string"},
            },
            "required": ["List-Unsubscribe"],
        },
        "ok": {200: ("Unsubscribed; no body.", None)},
        "plain_errors": {
            400: "The token is not valid (nothing says which part failed); no body.",
            413: "The body is over 64 kB.",
            429: "Too many refused tokens from this client or for this token; try later. "
            "A valid token is never refused this way. No body.",
        },
    },
}


def _site_switches(
    converter: OpenAPIConverter, field: fields.Field[Any], ret: dict[str, Any], **kwargs: Any
) -> dict[str, Any]:
    """apispec attribute function: what ``SiteSwitchList`` checks in code, as JSON Schema.

    Each item names one of the wiki's sites (an ``enum`` of their ids), and each site at
    most once (``maxContains``), so a body the document calls valid is one the API takes.
    """
    if not isinstance(field, schemas.SiteSwitchList):
        return {}
    site_ids = sorted(field.site_ids)
    item = converter.schema2jsonschema(schemas.AdminSiteUpdateSchema)
    item["properties"]["id"] = {"type": "string", "enum": site_ids}
    once = [{"contains": {"properties": {"id": {"const": site_id}}}, "minContains": 0,
             "maxContains": 1} for site_id in site_ids]
    return {"items": item, "maxItems": len(site_ids), "allOf": once}


def _content(schema: Any, media_type: str = JSON) -> dict[str, Any]:
    return {"content": {media_type: {"schema": schema}}}


def _header(name: str) -> dict[str, Any]:
    return {"schema": {"type": "string"}, "description": f"The `{name}` of the answer."}


def _responses(entry: dict[str, Any], limited: bool) -> dict[int, dict[str, Any]]:
    """The success responses, then the JSON errors (a rate limit's 429 where ``limited``),
    then the body-less ones."""
    responses: dict[int, dict[str, Any]] = {}
    if limited:
        responses[429] = {"description": RATE_LIMITED, **_content("Error"),
                          "headers": {"Retry-After": RETRY_AFTER}}
    for status, (description, schema) in entry["ok"].items():
        responses[status] = {"description": description}
        if schema is not None:
            responses[status].update(_content(schema))
        names = entry.get("headers", {}).get(status, ())
        if names:
            responses[status]["headers"] = {name: _header(name) for name in names}
    for status in entry.get("errors", ()):
        description = entry.get("error_text", {}).get(status, ERRORS[status])
        responses[status] = {"description": description, **_content("Error")}
    for status, description in entry.get("plain_errors", {}).items():
        responses[status] = {"description": description}
    return dict(sorted(responses.items()))


def _operation(
    endpoint: str, entry: dict[str, Any], st: State, *, limited: bool
) -> dict[str, Any]:
    """One operation object from its table entry; its ``operationId`` is the view's name."""
    operation: dict[str, Any] = {
        "operationId": endpoint.removeprefix("wikinotify."),
        "summary": entry["summary"],
        "responses": _responses(entry, limited),
    }
    if entry["method"] in WRITE_METHODS:
        operation["security"] = [{SESSION: [], CSRF: []}]
    for key in ("description", "parameters", "security"):
        if key in entry:
            operation[key] = entry[key]
    body = entry.get("body")
    if body is not None:
        schema = body if isinstance(body, type) else body(st)
        operation["requestBody"] = {
            "required": entry.get("body_required", True), **_content(schema)
        }
    if "form" in entry:
        operation["requestBody"] = {"required": True, **_content(entry["form"], FORM)}
    return operation


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
    for endpoint, entry in {**OPERATIONS, **PUBLIC_OPERATIONS}.items():
        view = app.view_functions.get(endpoint)
        if view is None:
            continue  # a route this app does not have (an older host, a removed page)
        operation = _operation(endpoint, entry, st, limited=bool(ratelimit.limited_by(view)))
        spec.path(view=view, app=app, operations={entry["method"]: operation})
    return spec.to_dict()
