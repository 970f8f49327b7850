"""Webhooks and chat targets: the JSON API (``/api/webhooks``, ``/api/chat``).

Every signed-in account manages its own endpoints; an administrator also manages the
site's (site-wide webhooks, told of events by category) through the same routes, with
``"scope": "site"`` when creating and ``?scope=site`` when listing. Someone else's
endpoint, or the site's for anyone else, answers as one that does not exist.
"""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue
from flask_babel import gettext

from .. import ratelimit
from ..inbox import parse_id
from ..login import caller_id
from ..models import Delivery, Endpoint, EndpointKind
from ..openapi import CURSOR, WRITE_ERRORS, operation, path_id, per_category
from ..outbound import endpoints, engine
from ..outbound.endpoints import Caller, Refused
from ..schemas import (
    ENDPOINT_SCOPES,
    ChatTargetSchema,
    ChatTargetsSchema,
    DeliveriesQuerySchema,
    DeliveryPageSchema,
    DeliverySchema,
    WebhookSchema,
    WebhookSecretSchema,
    WebhooksQuerySchema,
    WebhooksSchema,
    chat_create_schema,
    dump,
    load,
    webhook_create_schema,
    webhook_update_schema,
)
from ..state import state
from .core import api_login_required, bp, json_body, json_error, session
from .reader_time import exact_here

webhook_schema = WebhookSchema()
webhook_secret_schema = WebhookSecretSchema()
webhooks_schema = WebhooksSchema()
webhooks_query_schema = WebhooksQuerySchema()
deliveries_query_schema = DeliveriesQuerySchema()
delivery_schema = DeliverySchema()
delivery_page_schema = DeliveryPageSchema()
chat_target_schema = ChatTargetSchema()
chat_targets_schema = ChatTargetsSchema()

# -- what the document says of several routes ---------------------------------------------

ENDPOINT_ID = path_id(
    "endpoint_id", "An endpoint's id. Another user's endpoint (or, for anyone but an "
    "administrator, a site-wide one), or anything that is not an id, answers 404 exactly "
    "as a missing one.")
NO_SUCH_ENDPOINT = {404: "No such endpoint among the caller's own (`not_found`)."}
#: A new webhook or chat target refused for its owner's cap.
TOO_MANY_ENDPOINTS = {409: "The owner (the site, for a site-wide webhook) already has the "
                      "most webhooks and chat targets together that "
                      "`WIKINOTIFY_ENDPOINTS_PER_ACCOUNT` allows (`too_many_endpoints`)."}
#: What a webhook or chat save may refuse with a 400 beyond its schema: the SSRF guard.
SSRF_TEXT = (
    " The URL is checked when saved, after DNS resolution: one whose host resolves to a "
    "loopback, private, link-local, multicast, unspecified or reserved address (IPv6 and "
    "IPv4-mapped ones included) is a 400 whose message says why, unless the operator's "
    "`WIKINOTIFY_OUTBOUND_ALLOW` names it."
)


class Forbidden(Exception):
    """The site's endpoints, asked for by someone who is not an administrator."""


class ShownSecret:
    """An endpoint and the signing secret just made for it, as
    :class:`~wikinotify.schemas.WebhookSecretSchema` dumps them: the row keeps the secret
    sealed, so the one shown is not the row's."""

    def __init__(self, endpoint: Endpoint, secret: str) -> None:
        self.endpoint = endpoint
        self.secret = secret

    def __getattr__(self, name: str) -> Any:
        return getattr(self.endpoint, name)


# -- what the API and the pages share ----------------------------------------------------


def caller() -> Caller:
    me = caller_id(required=True)
    return Caller(me, admin=state().host.is_admin(me))


def scope_owner(scope: str) -> str | None:
    """The owner id of new (or listed) endpoints of ``scope``: the caller's own, or
    ``None`` for the site's, which only an administrator may manage."""
    who = caller()
    if scope == "user":
        return who.user_id
    if not who.admin:
        raise Forbidden
    return None


def choosable(owner_id: str | None) -> list[str]:
    """The category keys an endpoint of ``owner_id`` may be told of: those its owner may
    choose in her preferences; for a site-wide endpoint, those the administrator asking
    may that anyone may hear of (``Category.told_to_anyone``): one never told outside
    the wiki would only ever be refused at the fan-out."""
    st = state()
    viewer = st.host.user(owner_id or caller_id(required=True))
    if viewer is None:
        return []
    admin = owner_id is None or st.host.is_admin(owner_id)
    return [c.key for c in st.registry.visible_to(viewer, admin)
            if owner_id is not None or c.told_to_anyone]


def check_site(owner_id: str | None, site_id: str | None) -> str | None:
    if site_id is None:
        return None
    if owner_id is not None:
        raise Refused("siteId", "Only a site-wide webhook listens to one site.")
    if site_id not in {site.id for site in state().host.sites()}:
        raise Refused("siteId", "No site has this id.")
    return site_id


def create_webhook(body: dict[str, Any]) -> tuple[Endpoint, str]:
    """Check and create a webhook from a loaded create body; commit; kick the deliveries
    (its verification waits). One path for the API and the pages."""
    owner_id = scope_owner(body["scope"])
    categories = endpoints.check_categories(body["categories"], choosable(owner_id))
    site_id = check_site(owner_id, body["site_id"])
    url = endpoints.check_url(body["url"])
    endpoint, secret = endpoints.create_webhook(
        session(), owner_id, url=url, categories=categories,
        description=body["description"], site_id=site_id,
    )
    audit("createNotificationEndpoint", endpoint, categories=categories)
    commit_and_kick()
    return endpoint, secret


def create_chat(body: dict[str, Any]) -> Endpoint:
    me = caller_id(required=True)
    keys = choosable(me)
    wanted = keys if body["categories"] is None else body["categories"]
    categories = endpoints.check_categories(wanted, keys)
    url, hint = endpoints.check_chat_target(body["url"])
    endpoint = endpoints.create_chat(
        session(), me, url=url, hint=hint, categories=categories,
        description=body["description"],
    )
    audit("createNotificationEndpoint", endpoint, categories=categories)
    session().commit()
    return endpoint


def change(endpoint: Endpoint, changes: dict[str, Any]) -> None:
    """Apply checked ``changes``, audit the names of those that changed something,
    commit and kick (a re-enabled endpoint may have its verification waiting)."""
    changed = endpoints.update(session(), endpoint, changes)
    if changed:
        audit(endpoints.UPDATED, endpoint, fields=changed)
    commit_and_kick()


def rotate(endpoint: Endpoint) -> str:
    """A new signing secret, audited and committed (:class:`.endpoints.RotationPending`
    while the previous one still signs)."""
    secret = endpoints.rotate_secret(session(), endpoint)
    audit("rotateNotificationEndpointSecret", endpoint)
    session().commit()
    return secret


def delete(endpoint: Endpoint) -> None:
    audit("deleteNotificationEndpoint", endpoint)
    endpoints.delete(session(), endpoint)
    session().commit()


def audit(action: str, endpoint: Endpoint, **more: Any) -> None:
    """Record a change to ``endpoint`` in the wiki's audit log, before its commit: a
    site-wide endpoint's as an administrator's act, an account's own as a profile change.
    What is recorded never holds a secret (:func:`.endpoints.audited`)."""
    endpoints.audit(state().host, action, endpoint, actor_id=caller_id(required=True), **more)


def send_test(endpoint: Endpoint) -> Delivery | None:
    text = gettext("This is a test message from the wiki's notifications.")
    delivery = endpoints.send_test(session(), endpoint, text)
    commit_and_kick()
    return delivery


def commit_and_kick() -> None:
    """Commit, then ask for a delivery run (after the commit: the run reads what is
    committed). The minute cron catches up if Redis is away."""
    session().commit()
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    engine.kick(current_app._get_current_object())  # type: ignore[attr-defined]


def found(raw_id: str, kind: str) -> Endpoint | None:
    endpoint_id = parse_id(raw_id)
    if endpoint_id is None:
        return None
    return endpoints.find(session(), caller(), endpoint_id, kind)


# -- errors -------------------------------------------------------------------------------


@bp.errorhandler(Forbidden)
def _forbidden(_: Forbidden) -> ResponseReturnValue:
    return json_error(403, "forbidden", "Only administrators manage site-wide webhooks.")


@bp.errorhandler(endpoints.TooMany)
def _too_many(error: endpoints.TooMany) -> ResponseReturnValue:
    return json_error(409, "too_many_endpoints", too_many(error))


def too_many(error: endpoints.TooMany) -> str:
    return gettext(
        "There are %(limit)s webhooks and chat targets here already, the most allowed: "
        "delete one before adding another.", limit=error.limit)


def _missing() -> ResponseReturnValue:
    return json_error(404, "not_found", "No such endpoint.")


# -- webhooks -----------------------------------------------------------------------------


@bp.get("/api/webhooks")
@operation(
    summary="The caller's webhook endpoints, or the site's",
    description="`?scope=user` (the default): the caller's own, told of her own "
    "notifications as a channel beside in-app and email. `?scope=site`: the site-wide "
    "ones, told of events by category (administrators only). Never a signing secret.",
    parameters=[
        {"in": "query", "name": "scope", "required": False,
         "schema": {"type": "string", "enum": list(ENDPOINT_SCOPES)}},
    ],
    ok={200: ("The endpoints, oldest first.", WebhooksSchema)},
    errors=(400, 401, 403),
)
@api_login_required
def list_webhooks() -> ResponseReturnValue:
    query = load(webhooks_query_schema, request.args.to_dict())
    owner_id = scope_owner(query["scope"])
    items = endpoints.list_endpoints(session(), owner_id, EndpointKind.WEBHOOK)
    return dump(webhooks_schema, {"items": items})


@bp.post("/api/webhooks")
@operation(
    summary="Add a webhook endpoint",
    description="`url` and `categories` (keys the owner may choose); `scope: site` "
    "for a site-wide endpoint (administrators; `siteId` narrows it to one site). The "
    "answer carries the signing secret (`whsec_...`), shown this once. The endpoint "
    "starts `unverified`: it is sent a signed `webhook.verification` event whose data "
    "holds a `challenge`, and becomes `active` when it answers 2xx with the JSON body "
    "`{\"challenge\": <the same>}`. Until then nothing else is sent to it." + SSRF_TEXT,
    body=per_category(webhook_create_schema),
    ok={201: ("The endpoint and its secret (`Cache-Control: no-store`).",
              WebhookSecretSchema)},
    headers={201: ("Cache-Control",)},
    errors=(*WRITE_ERRORS, 403, 409),
    error_text=TOO_MANY_ENDPOINTS,
)
@ratelimit.sends
@api_login_required
def create_webhook_api() -> ResponseReturnValue:
    endpoint, secret = create_webhook(load(webhook_create_schema(), json_body()))
    return showing_secret(endpoint, secret), 201


@bp.patch("/api/webhooks/<endpoint_id>")
@operation(
    summary="Change a webhook endpoint",
    description="What is left out stays. A new `url` must be verified again, and "
    "the deliveries waiting for the old one are cancelled; `enabled: false` disables "
    "the endpoint and cancels what waits (enabling it does not replay that)."
    + SSRF_TEXT,
    parameters=[ENDPOINT_ID],
    body=per_category(webhook_update_schema),
    ok={200: ("The endpoint as stored.", WebhookSchema)},
    errors=(*WRITE_ERRORS, 404),
    error_text=NO_SUCH_ENDPOINT,
)
@ratelimit.sends
@api_login_required
def update_webhook(endpoint_id: str) -> ResponseReturnValue:
    body = load(webhook_update_schema(), json_body())
    endpoint = found(endpoint_id, EndpointKind.WEBHOOK)
    if endpoint is None:
        return _missing()
    if "categories" in body:
        body["categories"] = endpoints.check_categories(
            body["categories"], choosable(endpoint.owner_id))
    if "url" in body:
        body["url"] = endpoints.check_url(body["url"])
    change(endpoint, body)
    return dump(webhook_schema, endpoint)


@bp.delete("/api/webhooks/<endpoint_id>")
@operation(
    summary="Delete a webhook endpoint and its deliveries",
    parameters=[ENDPOINT_ID],
    ok={204: ("Deleted.", None)},
    errors=(*WRITE_ERRORS, 404),
    error_text=NO_SUCH_ENDPOINT,
)
@ratelimit.writes
@api_login_required
def delete_webhook(endpoint_id: str) -> ResponseReturnValue:
    return _delete(endpoint_id, EndpointKind.WEBHOOK)


@bp.post("/api/webhooks/<endpoint_id>/rotate-secret")
@operation(
    summary="Rotate a webhook's signing secret",
    description="A new secret, shown this once. For 24 hours (`previousSecretUntil`) "
    "every request carries a second signature made with the old secret, so a receiver "
    "can switch without dropping a delivery. One previous secret is kept: while it "
    "still signs, another rotation is a 409 (`rotation_pending`, naming when it ends), "
    "so a receiver is never left with no secret it knows. No body is needed.",
    parameters=[ENDPOINT_ID],
    ok={200: ("The endpoint and its new secret (`Cache-Control: no-store`).",
              WebhookSecretSchema)},
    headers={200: ("Cache-Control",)},
    errors=(*WRITE_ERRORS, 404, 409),
    error_text={**NO_SUCH_ENDPOINT,
                409: "The previous secret still signs (`rotation_pending`)."},
)
@ratelimit.writes
@api_login_required
def rotate_webhook_secret(endpoint_id: str) -> ResponseReturnValue:
    endpoint = found(endpoint_id, EndpointKind.WEBHOOK)
    if endpoint is None:
        return _missing()
    try:
        secret = rotate(endpoint)
    except endpoints.RotationPending as pending:
        return json_error(409, "rotation_pending", rotation_pending(pending))
    return showing_secret(endpoint, secret)


def rotation_pending(pending: endpoints.RotationPending) -> str:
    return gettext(
        "The previous secret still signs until %(until)s: rotate again after that, "
        "once your receiver uses the newest secret.",
        until=exact_here(pending.until))


def showing_secret(endpoint: Endpoint, secret: str) -> Response:
    """The endpoint with its secret, shown this once: no cache may keep the answer."""
    response = jsonify(dump(webhook_secret_schema, ShownSecret(endpoint, secret)))
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.post("/api/webhooks/<endpoint_id>/test")
@operation(
    summary="Send a test event",
    description="An active endpoint is sent a signed `webhook.test` event; an "
    "unverified one its verification event again. At most one test waits per "
    "endpoint: asked again before it went, the answer is the one waiting. No body is "
    "needed.",
    parameters=[ENDPOINT_ID],
    ok={202: ("The delivery, queued.", DeliverySchema)},
    errors=(*WRITE_ERRORS, 404, 409),
    error_text={**NO_SUCH_ENDPOINT, 409: "The endpoint is disabled (`disabled`)."},
)
@ratelimit.sends
@api_login_required
def test_webhook(endpoint_id: str) -> ResponseReturnValue:
    return _test(endpoint_id, EndpointKind.WEBHOOK)


@bp.get("/api/webhooks/<endpoint_id>/deliveries")
@operation(
    summary="A webhook's deliveries, newest first",
    description="Fifty per page, keyset-paginated: pass `nextCursor` back as "
    "`cursor`. Each shows its state, attempts, the last response code and latency, and "
    "the class of its last failure (`transient`, `rate_limit`, `permanent`, `gone`, "
    "`blocked`, `ineligible`).",
    parameters=[ENDPOINT_ID, CURSOR],
    ok={200: ("A page of deliveries.", DeliveryPageSchema)},
    errors=(400, 401, 404),
    error_text=NO_SUCH_ENDPOINT,
)
@api_login_required
def webhook_deliveries(endpoint_id: str) -> ResponseReturnValue:
    query = load(deliveries_query_schema, request.args.to_dict())
    before = endpoints.parse_cursor(query["cursor"])
    endpoint = found(endpoint_id, EndpointKind.WEBHOOK)
    if endpoint is None:
        return _missing()
    page = endpoints.deliveries(session(), caller(), endpoint.id, before=before)
    return dump(delivery_page_schema, page)


# -- chat ---------------------------------------------------------------------------------


@bp.get("/api/chat")
@operation(
    summary="The caller's chat targets",
    description="Each target shows Apprise's masked form of its URL, never the URL.",
    ok={200: ("The chat targets, oldest first.", ChatTargetsSchema)},
    errors=(401,),
)
@api_login_required
def list_chat() -> ResponseReturnValue:
    items = endpoints.list_endpoints(session(), caller_id(required=True), EndpointKind.CHAT)
    return dump(chat_targets_schema, {"items": items})


@bp.post("/api/chat")
@operation(
    summary="Add a chat target",
    description="`url` is an Apprise URL (Telegram, Slack, Matrix, Discord, ntfy, "
    "Mattermost...). It is stored encrypted and never returned: the answer shows its "
    "masked form. `categories` left out: every category the caller may see (the chat "
    "column of her preferences then chooses). Refused with a 400: generic targets "
    "(`json://`, `xml://`, `form://`: add a webhook instead), headers or fields set "
    "through parameters (`+X=`, `-x=`, `:x=`), `method=`, and any parameter off the "
    "allow-list, such as one naming a local file (`template=`)." + SSRF_TEXT,
    body=per_category(chat_create_schema),
    ok={201: ("The chat target.", ChatTargetSchema)},
    errors=(*WRITE_ERRORS, 409),
    error_text=TOO_MANY_ENDPOINTS,
)
@ratelimit.sends
@api_login_required
def create_chat_api() -> ResponseReturnValue:
    endpoint = create_chat(load(chat_create_schema(), json_body()))
    return dump(chat_target_schema, endpoint), 201


@bp.delete("/api/chat/<endpoint_id>")
@operation(
    summary="Delete a chat target and its deliveries",
    parameters=[ENDPOINT_ID],
    ok={204: ("Deleted.", None)},
    errors=(*WRITE_ERRORS, 404),
    error_text=NO_SUCH_ENDPOINT,
)
@ratelimit.writes
@api_login_required
def delete_chat(endpoint_id: str) -> ResponseReturnValue:
    return _delete(endpoint_id, EndpointKind.CHAT)


@bp.post("/api/chat/<endpoint_id>/test")
@operation(
    summary="Send a test chat message",
    parameters=[ENDPOINT_ID],
    ok={202: ("The delivery, queued.", DeliverySchema)},
    errors=(*WRITE_ERRORS, 404, 409),
    error_text={**NO_SUCH_ENDPOINT, 409: "The target is disabled (`disabled`)."},
)
@ratelimit.sends
@api_login_required
def test_chat(endpoint_id: str) -> ResponseReturnValue:
    return _test(endpoint_id, EndpointKind.CHAT)


def _delete(endpoint_id: str, kind: str) -> ResponseReturnValue:
    endpoint = found(endpoint_id, kind)
    if endpoint is None:
        return _missing()
    delete(endpoint)
    return "", 204


def _test(endpoint_id: str, kind: str) -> ResponseReturnValue:
    endpoint = found(endpoint_id, kind)
    if endpoint is None:
        return _missing()
    delivery = send_test(endpoint)
    if delivery is None:
        return json_error(409, "disabled", "The endpoint is disabled: enable it first.")
    return dump(delivery_schema, delivery), 202
