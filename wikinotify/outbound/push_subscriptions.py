"""Browsers' push subscriptions as their readers manage them (docs/channels.md#browser-push).

A subscription is an :class:`~wikinotify.models.Endpoint` of kind ``push`` (its URL the push
service's, active at once: only the browser could have given it) and a
:class:`~wikinotify.models.PushSubscription` row with the browser's keys, the auth secret
sealed. Every statement names the reader in its SQL; someone else's subscription is never
found, so it answers as one that does not exist.

One browser has one subscription whoever is signed in: subscribing the same push URL again
replaces the row, the reader's own or the last person's who used that browser; and
signing out the session that subscribed removes it (:func:`end_session`), so
notifications never reach a browser for an account no longer signed in there. A reader
holds at most ``WIKINOTIFY_PUSH_PER_ACCOUNT``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy.orm import Session

from .. import dialects
from ..config import config
from ..models import Delivery, Endpoint, EndpointKind, EndpointState, PushSubscription, utcnow
from . import endpoints, push, push_keys, secrets_box, ssrf
from .endpoints import Refused


class TooMany(Exception):
    """One subscription more than ``WIKINOTIFY_PUSH_PER_ACCOUNT`` allows: a 409."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"at most {limit} push subscriptions per account")
        self.limit = limit


@dataclass(frozen=True)
class Subscription:
    """A subscription as its reader sees it."""

    id: int
    browser: str
    #: The push service's host, not its URL (the URL is the subscription's capability).
    service: str
    #: SHA-256 of the URL: how a page finds its own browser's subscription in the list.
    endpoint_hash: str
    created_at: datetime
    last_used_at: datetime | None


#: A browser's name from its User-Agent, first match wins (Edge and Opera say "Chrome"
#: too, Chrome says "Safari"): simple on purpose, a label for the reader to tell her
#: devices apart, never used to decide anything.
BROWSERS = (("Edg/", "Edge"), ("OPR/", "Opera"), ("SamsungBrowser/", "Samsung Internet"),
            ("Firefox/", "Firefox"), ("Chromium/", "Chromium"), ("HeadlessChrome/", "Chrome"),
            ("Chrome/", "Chrome"), ("Safari/", "Safari"))
SYSTEMS = (("Android", "Android"), ("iPhone", "iOS"), ("iPad", "iPadOS"),
           ("Windows", "Windows"), ("Mac OS X", "macOS"), ("CrOS", "ChromeOS"),
           ("Linux", "Linux"))


def browser_of(user_agent: str | None) -> str:
    """"Firefox on Linux", from a User-Agent; "" when nothing is recognised."""
    text = user_agent or ""
    name = next((label for token, label in BROWSERS if token in text), "")
    system = next((label for token, label in SYSTEMS if token in text), "")
    if name and system:
        return f"{name} on {system}"
    return name or system


_B64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")


def check_keys(keys: dict[str, str]) -> tuple[str, str]:
    """``(p256dh, auth)`` if they are a browser's: a point of P-256 (65 bytes,
    uncompressed, on the curve: any other could never be encrypted to) and a 16-byte
    secret, base64url; :class:`Refused` naming the key otherwise."""
    p256dh, auth = keys["p256dh"].strip(), keys["auth"].strip()
    for name, value, size in (("p256dh", p256dh, 65), ("auth", auth, 16)):
        try:
            if not _B64URL.fullmatch(value):
                raise ValueError(name)
            raw = push_keys.unb64url(value)
        except ValueError:
            raise Refused(f"keys.{name}", "Not base64url.") from None
        if len(raw) != size or (name == "p256dh" and not _on_the_curve(raw)):
            raise Refused(f"keys.{name}", f"Not a browser's {name} key ({size} bytes).")
    return p256dh.rstrip("="), auth.rstrip("=")


def _on_the_curve(raw: bytes) -> bool:
    """Whether ``raw`` is an uncompressed point of P-256."""
    if raw[:1] != b"\x04":
        return False
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    except ValueError:
        return False
    return True


def check_endpoint(url: str) -> str:
    """A push URL that may be saved (:func:`.push.check_url`); :class:`Refused` naming
    ``endpoint`` with the reason."""
    url = url.strip()
    try:
        push.check_url(url, ssrf.allowed())
    except push.Refused as refused:
        raise Refused("endpoint", f"This push endpoint is refused: {refused}.") from None
    except ssrf.Blocked as blocked:
        raise Refused("endpoint", f"This push endpoint is refused: {blocked.reason}.") from None
    return url


def _shown(endpoint: Endpoint, row: PushSubscription) -> Subscription:
    host = ssrf.parse(endpoint.url or "")[1] if endpoint.url else ""
    return Subscription(endpoint.id, row.browser, host, row.url_hash, row.created_at,
                        row.last_used_at)


def list_for(session: Session, user_id: str) -> list[Subscription]:
    """``user_id``'s subscriptions, oldest first."""
    rows = session.execute(
        sa.select(Endpoint, PushSubscription)
        .join(PushSubscription, PushSubscription.endpoint_id == Endpoint.id)
        .where(Endpoint.owner_id == user_id, PushSubscription.user_id == user_id,
               Endpoint.kind == EndpointKind.PUSH)
        .order_by(Endpoint.id)
    )
    return [_shown(endpoint, row) for endpoint, row in rows]


def find(session: Session, user_id: str, subscription_id: int) -> Endpoint | None:
    """The endpoint of ``user_id``'s subscription ``subscription_id``, or ``None`` (the
    same for someone else's as for one that does not exist)."""
    return endpoints.find(session, endpoints.Caller(user_id), subscription_id, EndpointKind.PUSH)


def subscribe(session: Session, user_id: str, *, url: str, p256dh: str, auth: str,
              browser: str, session_id: str | None) -> tuple[Subscription, bool]:
    """Store a checked subscription for ``user_id``; ``(it, created)``, ``created`` false
    when it replaced her own. The same push URL again (this browser, subscribed before by
    her or by someone else) replaces its row. ``session_id`` is the signed-in session's
    (:func:`wikinotify.login.stream_session_id`), whose sign-out removes it.
    :class:`TooMany` when she holds as many as allowed already."""
    digest = push.url_hash(url)
    dialects.write_lock(session, PushSubscription.__table__,
                        f"wikinotify_push_subscriptions:{digest}")
    previous = session.execute(sa.select(PushSubscription.endpoint_id, PushSubscription.user_id)
                               .where(PushSubscription.url_hash == digest)).first()
    if previous is not None:
        old = session.get(Endpoint, previous.endpoint_id)
        if old is not None:
            remove(session, old)
        session.flush()
    dialects.write_lock(session, PushSubscription.__table__,
                        f"wikinotify_push_subscriptions:{user_id}")
    limit = config("PUSH_PER_ACCOUNT")
    held = session.scalar(sa.select(sa.func.count()).select_from(PushSubscription).where(
        PushSubscription.user_id == user_id)) or 0
    if held >= limit:
        raise TooMany(limit)
    now = utcnow()
    endpoint = Endpoint(kind=EndpointKind.PUSH, owner_id=user_id, url=url, categories=[],
                        target_hint=browser[:255], state=EndpointState.ACTIVE, verified_at=now)
    session.add(endpoint)
    session.flush()
    row = PushSubscription(endpoint_id=endpoint.id, user_id=user_id, url_hash=digest,
                           p256dh=p256dh, auth_encrypted=secrets_box.seal(auth),
                           browser=browser[:64], session_id=session_id, created_at=now)
    session.add(row)
    session.flush()
    return _shown(endpoint, row), previous is None or previous.user_id != user_id


def remove(session: Session, endpoint: Endpoint) -> None:
    """Delete a subscription, its endpoint and its deliveries (said here, not left to the
    foreign keys' cascade, which SQLite applies only with its foreign keys on)."""
    session.execute(sa.delete(PushSubscription).where(
        PushSubscription.endpoint_id == endpoint.id))
    session.execute(sa.delete(Delivery).where(Delivery.endpoint_id == endpoint.id))
    session.delete(endpoint)


def used(session: Session, endpoint_id: int, when: datetime) -> None:
    """Note that a push reached the subscription's service at ``when``."""
    session.execute(sa.update(PushSubscription).where(
        PushSubscription.endpoint_id == endpoint_id).values(last_used_at=when))


def end_session(session: Session, user_id: str, session_id: str | None) -> None:
    """A session of ``user_id`` is signed out: the subscriptions it made go, with those
    made without a session id (``None`` removes only these), as its streams end
    (:func:`wikinotify.login.end_session`)."""
    same = (PushSubscription.session_id.is_(None) if session_id is None
            else PushSubscription.session_id == session_id)
    ids = session.scalars(sa.select(PushSubscription.endpoint_id).where(
        PushSubscription.user_id == user_id, same)).all()
    for endpoint in session.scalars(sa.select(Endpoint).where(
            Endpoint.owner_id == user_id, Endpoint.id.in_(ids))):
        remove(session, endpoint)
