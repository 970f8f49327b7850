"""Browser push (docs/channels.md#browser-push): the service worker, the VAPID public key,
and the caller's browsers' subscriptions (``/api/push/...``).

Every signed-in account manages its own subscriptions; someone else's answers as one that
does not exist.
"""

from __future__ import annotations

import os

from flask import Response, request
from flask.typing import ResponseReturnValue
from flask_babel import gettext

from .. import ratelimit
from ..inbox import parse_id
from ..login import caller_id, stream_session_id
from ..openapi import WRITE_ERRORS, operation, path_id
from ..outbound import push_keys, push_subscriptions
from ..schemas import dump, load
from ..schemas.push import (
    PushKeySchema,
    PushSubscribeSchema,
    PushSubscriptionSchema,
    PushSubscriptionsSchema,
)
from ..state import state
from .core import api_login_required, bp, json_body, json_error, session

push_key_schema = PushKeySchema()
push_subscribe_schema = PushSubscribeSchema()
push_subscription_schema = PushSubscriptionSchema()
push_subscriptions_schema = PushSubscriptionsSchema()

SUBSCRIPTION_ID = path_id(
    "subscription_id", "A push subscription's id. Another user's, or anything that is not "
    "an id, answers 404 exactly as a missing one.")


@bp.get("/sw.js")
def service_worker() -> Response:
    """The service worker. Served from the blueprint's prefix, its scope is that prefix
    (``/_notifications/``): it controls none of the wiki's pages (it has no fetch
    handler) and needs none, since a push reaches a browser's registration wherever the
    reader is. Never cached for long, so a new version reaches browsers at once."""
    with open(os.path.join(bp.static_folder or "", "sw.js"), encoding="utf-8") as script:
        response = Response(script.read(), mimetype="text/javascript")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["Service-Worker-Allowed"] = request.path.rsplit("/", 1)[0] + "/"
    return response


@bp.get("/api/push/key")
@operation(
    summary="The VAPID public key",
    description="The `applicationServerKey` a page passes to `PushManager.subscribe`: an "
    "uncompressed P-256 point, base64url. Generated once per installation (or the "
    "operator's `WIKINOTIFY_VAPID_PRIVATE_KEY`'s).",
    ok={200: ("The key.", PushKeySchema)},
    errors=(401,),
)
@api_login_required
def push_key() -> ResponseReturnValue:
    key = push_keys.private_key(session())
    session().commit()
    return dump(push_key_schema, {"public_key": push_keys.public_key(key)})


@bp.get("/api/push/subscriptions")
@operation(
    summary="The caller's browser push subscriptions",
    description="Each with the browser it was made from and its last use; never its URL "
    "or keys.",
    ok={200: ("The subscriptions, oldest first.", PushSubscriptionsSchema)},
    errors=(401,),
)
@api_login_required
def list_push_subscriptions() -> ResponseReturnValue:
    items = push_subscriptions.list_for(session(), caller_id(required=True))
    return dump(push_subscriptions_schema, {"items": items})


@bp.post("/api/push/subscriptions")
@operation(
    summary="Subscribe a browser to push",
    description="The body is the browser's `PushSubscription.toJSON()`. The `endpoint` must "
    "be https on a known push service (Firebase Cloud Messaging, Mozilla's, Apple's, "
    "Windows'; the operator adds others with `WIKINOTIFY_PUSH_SERVICES`) and pass the "
    "SSRF guard, unless `WIKINOTIFY_OUTBOUND_ALLOW` names its host (then http too); "
    "otherwise a 400 naming `endpoint` says why. The same endpoint again (this browser, "
    "subscribed before, by the caller or by anyone) replaces the old subscription; 200 "
    "instead of 201 when it was the caller's own. Once subscribed, the preferences grid "
    "has a `push` column.",
    body=PushSubscribeSchema,
    ok={201: ("The subscription.", PushSubscriptionSchema),
        200: ("The browser's subscription, replaced.", PushSubscriptionSchema)},
    errors=(*WRITE_ERRORS, 409),
    error_text={409: "The caller holds as many subscriptions as `WIKINOTIFY_PUSH_PER_ACCOUNT` "
                "allows (`too_many_subscriptions`)."},
)
@ratelimit.writes
@api_login_required
def subscribe_push() -> ResponseReturnValue:
    body = load(push_subscribe_schema, json_body())
    url = push_subscriptions.check_endpoint(body["endpoint"])
    p256dh, auth = push_subscriptions.check_keys(body["keys"])
    me = caller_id(required=True)
    shown, created = push_subscriptions.subscribe(
        session(), me, url=url, p256dh=p256dh, auth=auth,
        browser=push_subscriptions.browser_of(request.headers.get("User-Agent")),
        session_id=stream_session_id())
    state().host.audit("createNotificationEndpoint", actor_id=me, kind="profile",
                       details={"endpoint": shown.id, "channel": "push",
                                "target": shown.service, "browser": shown.browser})
    session().commit()
    return dump(push_subscription_schema, shown), 201 if created else 200


@bp.delete("/api/push/subscriptions/<subscription_id>")
@operation(
    summary="Remove a browser's push subscription",
    description="Nothing more is pushed to that browser. The page also unsubscribes the "
    "browser itself; a browser that was not told stops hearing anyway.",
    parameters=[SUBSCRIPTION_ID],
    ok={204: ("Removed.", None)},
    errors=(*WRITE_ERRORS, 404),
    error_text={404: "No such subscription among the caller's own (`not_found`)."},
)
@ratelimit.writes
@api_login_required
def delete_push_subscription(subscription_id: str) -> ResponseReturnValue:
    number = parse_id(subscription_id)
    me = caller_id(required=True)
    endpoint = push_subscriptions.find(session(), me, number) if number else None
    if endpoint is None:
        return json_error(404, "not_found", "No such subscription.")
    state().host.audit("deleteNotificationEndpoint", actor_id=me, kind="profile",
                       details={"endpoint": endpoint.id, "channel": "push"})
    push_subscriptions.remove(session(), endpoint)
    session().commit()
    return "", 204


@bp.errorhandler(push_subscriptions.TooMany)
def _too_many(error: push_subscriptions.TooMany) -> ResponseReturnValue:
    return json_error(409, "too_many_subscriptions", gettext(
        "%(limit)s browsers receive your notifications already, the most allowed: remove "
        "one before adding another.", limit=error.limit))
