"""Web Push: a reader's notifications on her desktop or phone when no tab is open
(docs/channels.md#browser-push; RFC 8030, 8291, 8292).

A browser subscribes on the preferences page (``PushManager.subscribe`` with the VAPID
public key of :mod:`.push_keys`); the subscription is an endpoint of kind ``push``, and its
deliveries go through the same leased, classed and retried engine as webhooks and chat
(:mod:`.engine`), with this module's :func:`send_push` as the sender.

**Where a subscription may point** (:func:`check_url`): https, on a known push service
(:data:`PUSH_SERVICES`, a host or any of its subdomains, extended by
``WIKINOTIFY_PUSH_SERVICES``), and past the SSRF guard; a host ``WIKINOTIFY_OUTBOUND_ALLOW``
names is taken over http too (the test suite's push service on 127.0.0.1). Checked when a
browser subscribes and again before every send.

**The message** is the entry, in its reader's language (:func:`payload`): ``title`` (the
site), ``body`` (the entry's sentence, its excerpt below), ``url`` (its link, absolute),
``tag`` (the entry's id: a coalesced "edited 3 times" replaces "edited" on the screen), as
JSON, encrypted with aes128gcm to the browser's keys (pywebpush's ``WebPusher.encode``)
and signed with VAPID. ``TTL`` and ``Urgency`` are the category's (:data:`DELIVERY`).

**Answers**: 201 (or any 2xx) delivered; 404 and 410 mean the subscription has ended, and it
is removed (class ``gone``); 413, the payload is too large for the service, and it is sent
once more without the excerpt and with a shortened sentence; 429 is a rate limit
(``Retry-After`` honoured) and 5xx transient, tried again by the engine; anything else is
permanent. The request itself is :func:`.webhook.post`'s: to the address the guard
checked, every wait bounded, nothing followed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from flask import current_app

from ..config import config
from ..models import Delivery, Endpoint, PushSubscription
from ..state import state
from . import push_keys, secrets_box, ssrf, webhook
from .outcomes import GONE, Message, Outcome, blocked, from_status, unreachable

#: The push services of the browsers wikinotify was checked against, as host suffixes: a
#: subscription's endpoint must be on one of them (or on one the operator adds).
#: Chrome, Edge (Chromium), Opera, Brave, Samsung Internet: Firebase Cloud Messaging;
#: Firefox: Mozilla's autopush; Safari (macOS 13+, iOS 16.4+ from the home screen):
#: Apple's; legacy Edge: Windows Push Notification Services.
PUSH_SERVICES = (
    "fcm.googleapis.com",  # Chrome, Chromium-based browsers
    "android.googleapis.com",  # older Chrome subscriptions (GCM's endpoint)
    "push.services.mozilla.com",  # Firefox (updates.push.services.mozilla.com)
    "push.apple.com",  # Safari (web.push.apple.com)
    "notify.windows.com",  # Edge's WNS (*.notify.windows.com)
)

#: ``(Urgency, TTL seconds)`` per category (RFC 8030, sections 5.2 and 5.3), in one place: what a
#: reader is waited on for (a mention, a review asked of her, a reply) is ``high`` and kept
#: a day for a device that is off; what she watches is ``normal``; wikinotify's notices are
#: ``low``. A category not named here is ``normal`` for a day.
DELIVERY: dict[str, tuple[str, int]] = {
    "mention": ("high", 86400),
    "reviewRequested": ("high", 86400),
    "commentReply": ("high", 86400),
    "announcement": ("high", 3 * 86400),
    "suggestionReviewed": ("normal", 86400),
    "watchedPage": ("normal", 86400),
    "watchedPageComment": ("normal", 86400),
    "pageCreated": ("normal", 86400),
    "pageDeleted": ("normal", 86400),
    "endpointDisabled": ("low", 86400),
}
DEFAULT_DELIVERY = ("normal", 86400)

#: The most of a sentence a payload shrunk after a 413 keeps.
SHRUNK_TEXT = 120


class Refused(ValueError):
    """A subscription endpoint wikinotify does not send to; the message says why."""


def url_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def services() -> tuple[str, ...]:
    extra = config("PUSH_SERVICES") or ()
    return (*PUSH_SERVICES, *(h.strip().lower().rstrip(".") for h in extra))


def _on_service(hostname: str) -> bool:
    return any(hostname == s or hostname.endswith("." + s) for s in services())


def _named(hostname: str, allowed: ssrf.Allowed) -> bool:
    """Whether ``WIKINOTIFY_OUTBOUND_ALLOW`` names ``hostname``: as a host name, or, for an
    address written as the host, as an address or network it holds."""
    try:
        address = ipaddress.ip_address(hostname)
    except ValueError:
        return hostname in allowed.hosts
    return allowed.admits(hostname, address)


#: Why a subscription's endpoint is refused, said after "This push endpoint is refused:"
#: (wikinotify/refusals.py says each in the reader's language).
NOT_A_PUSH_URL = "not a push service URL"
HTTPS_ONLY = "a push service is reached over https only"
UNKNOWN_SERVICE = ("{hostname} is not a push service wikinotify knows; an operator adds one "
                   "with WIKINOTIFY_PUSH_SERVICES")
REASONS = (NOT_A_PUSH_URL, HTTPS_ONLY, UNKNOWN_SERVICE)


def check_url(url: str, allowed: ssrf.Allowed) -> ssrf.Target:
    """The checked target of a subscription's endpoint, or :class:`Refused` (a bad
    name, scheme or service) or :class:`ssrf.Blocked` (an address the guard refuses;
    :class:`ssrf.Unresolved` when the name does not resolve)."""
    if not isinstance(url, str) or len(url) > 2000:
        raise Refused(NOT_A_PUSH_URL)
    try:
        scheme, hostname, _, _ = ssrf.parse(url)
    except ssrf.Blocked as bad:
        raise Refused(bad.reason) from None
    trusted = _named(hostname, allowed)
    if scheme != "https" and not trusted:
        raise Refused(HTTPS_ONLY)
    if not trusted and not _on_service(hostname):
        raise Refused(UNKNOWN_SERVICE.format(hostname=hostname))
    return ssrf.check(url, allowed=allowed)


def delivery_of(category: str) -> tuple[str, int]:
    """``(Urgency, TTL)`` of ``category``'s pushes."""
    return DELIVERY.get(category, DEFAULT_DELIVERY)


@dataclass(frozen=True)
class Payload:
    title: str
    body: str
    url: str | None
    tag: str
    category: str

    def json(self) -> bytes:
        return json.dumps({"title": self.title, "body": self.body, "url": self.url,
                           "tag": self.tag, "category": self.category},
                          ensure_ascii=False, separators=(",", ":")).encode()

    def shrunk(self) -> Payload:
        """The payload a service that refused it as too large (413) is sent instead: the
        sentence alone, cut short, and no excerpt."""
        sentence = self.body.split("\n", 1)[0]
        if len(sentence) > SHRUNK_TEXT:
            sentence = sentence[:SHRUNK_TEXT - 1] + "…"
        return Payload(self.title[:80], sentence, self.url, self.tag, self.category)


def payload(message: Message) -> Payload:
    """The push about ``message`` (built by :mod:`.payloads`, in the reader's language):
    the entry as its webhook carries it."""
    data: dict[str, Any] = json.loads(message.body).get("data") or {}
    body = str(data.get("text") or "")
    if data.get("excerpt"):
        body = f"{body}\n{data['excerpt']}"
    return Payload(title=message.title, body=body, url=data.get("url"),
                   tag=str(data.get("id", "")), category=message.type)


def _subscription(endpoint: Endpoint) -> PushSubscription | None:
    session = state().db.session()
    found = session.get(PushSubscription, endpoint.id)
    if found is not None:
        session.expunge(found)
    return found


def send_push(endpoint: Endpoint, delivery: Delivery, message: Message) -> Outcome:
    """The delivery engine's sender for push endpoints (the contract is in :mod:`.engine`)."""
    url = endpoint.url
    subscription = _subscription(endpoint)
    session = state().db.session()
    key = push_keys.private_key(session)
    session.commit()  # no transaction open across the request
    if subscription is None or not url:
        return Outcome(error_class=GONE, error="the subscription is gone")
    try:
        target = check_url(url, ssrf.allowed())
    except Refused as refused:
        return blocked(str(refused))
    except ssrf.Unresolved as failed:
        return unreachable(failed.reason)
    except ssrf.Blocked as refused:
        return blocked(refused.reason)
    try:
        auth = secrets_box.unseal(subscription.auth_encrypted)
    except secrets_box.Unreadable:
        return Outcome(error_class=GONE,
                       error="the subscription's secret cannot be unsealed (was SECRET_KEY "
                             "changed?)")
    pushed = payload(message)
    urgency, ttl = delivery_of(pushed.category)
    sub = push_keys.subject(pushed.url or current_app.config.get("WIKINOTIFY_SITE_URL"))
    headers = {
        "Authorization": push_keys.authorization(key, url, sub),
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "TTL": str(ttl),
        "Urgency": urgency,
        "Host": target.host_header,
        "User-Agent": "wikinotify-push/1",
    }
    keys = {"p256dh": subscription.p256dh, "auth": auth}
    outcome = _post(target, keys, pushed, headers)
    if outcome.status == 413:
        outcome = _post(target, keys, pushed.shrunk(), headers)
    return outcome


def _post(target: ssrf.Target, keys: dict[str, str], pushed: Payload,
          headers: dict[str, str]) -> Outcome:
    from pywebpush import WebPusher

    body = WebPusher({"endpoint": target.url, "keys": keys}).encode(
        pushed.json(), content_encoding="aes128gcm")["body"]
    outcome = webhook.post(target, body, headers,
                           connect_timeout=float(config("OUTBOUND_CONNECT_TIMEOUT")),
                           timeout=float(config("OUTBOUND_TIMEOUT")))
    return classify(outcome)


def classify(outcome: Outcome) -> Outcome:
    """A push service's answer as the engine classes it: 404 and 410 both end the
    subscription (RFC 8030, sections 6.2 and 7.3); 413 says which payload was refused."""
    if outcome.status in (404, 410):
        return Outcome(status=outcome.status, latency_ms=outcome.latency_ms,
                       error_class=GONE,
                       error=f"{outcome.status}: the browser's subscription has ended")
    if outcome.status == 413:
        return Outcome(status=413, latency_ms=outcome.latency_ms,
                       error_class=from_status(413, latency_ms=None).error_class,
                       error="413: the push service refused the payload as too large")
    return outcome
