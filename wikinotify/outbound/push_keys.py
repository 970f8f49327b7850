"""The VAPID key pair Web Push requests are signed with (RFC 8292; docs/channels.md#browser-push).

One P-256 key pair per installation: the operator's (``WIKINOTIFY_VAPID_PRIVATE_KEY``, raw
32 bytes in base64url as ``vapid --gen`` and the web-push tools print it, or PEM), else one
generated the first time it is needed and kept in the instance settings, sealed like the
other secrets (:mod:`.secrets_box`). The public key is what a browser subscribes with
(``applicationServerKey``): a push service accepts a message for a subscription only when it
is signed by the key the subscription was made with, so changing the key ends every
subscription. The private key is never returned, never logged.
"""

from __future__ import annotations

import base64
import time
import weakref
from urllib.parse import urlsplit

import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flask import Flask, current_app
from sqlalchemy.orm import Session

from ..config import ConfigError, config
from ..instance_settings import instance_settings
from ..models import InstanceSettings
from . import secrets_box

SETTING = "WIKINOTIFY_VAPID_PRIVATE_KEY"
#: How long a signature is good for: RFC 8292 allows at most 24 hours.
SIGNATURE_LIFETIME = 12 * 3600

# The key of each app, once read: a send needs it with no transaction open.
_keys: weakref.WeakKeyDictionary[Flask, ec.EllipticCurvePrivateKey] = (
    weakref.WeakKeyDictionary())


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    text = "".join(text.split())
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse(text: str) -> ec.EllipticCurvePrivateKey:
    """The P-256 private key ``text`` holds (raw base64url, or PEM); ``ValueError``
    saying what is wrong with it (never quoting it)."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except (ValueError, TypeError):
            raise ValueError("the PEM does not hold an unencrypted private key") from None
    else:
        try:
            raw = unb64url(text)
        except ValueError:
            raise ValueError("it is neither PEM nor base64url") from None
        if len(raw) != 32:
            raise ValueError(f"a raw key is 32 bytes, and this one is {len(raw)}")
        try:
            key = ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
        except ValueError:
            raise ValueError("it is not a valid P-256 private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("VAPID keys are P-256 (prime256v1) EC keys")
    return key


def check(app: Flask) -> None:
    """Refuse at start-up a malformed ``WIKINOTIFY_VAPID_PRIVATE_KEY``, naming it."""
    given = app.config.get(SETTING)
    if given is None:
        return
    try:
        parse(given)
    except ValueError as wrong:
        raise ConfigError(
            f"{SETTING} is not a usable VAPID key: {wrong}. Give a P-256 private key, raw "
            "(32 bytes, base64url) or PEM, or leave it None to have one generated."
        ) from None


def raw(key: ec.EllipticCurvePrivateKey) -> str:
    return b64url(key.private_numbers().private_value.to_bytes(32, "big"))


def public_key(key: ec.EllipticCurvePrivateKey) -> str:
    """The public key as a browser's ``applicationServerKey`` takes it: the uncompressed
    point, base64url without padding."""
    point = key.public_key().public_bytes(serialization.Encoding.X962,
                                          serialization.PublicFormat.UncompressedPoint)
    return b64url(point)


def private_key(session: Session, app: Flask | None = None) -> ec.EllipticCurvePrivateKey:
    """The installation's key: the setting's, else the sealed one, generated and stored on
    first use (two first uses at once store one: the second finds the first's)."""
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    found = _keys.get(app)
    if found is not None:
        return found
    given = app.config.get(SETTING)
    if given is not None:
        key = parse(given)
    else:
        key = _stored(session, app)
    _keys[app] = key
    return key


def _stored(session: Session, app: Flask) -> ec.EllipticCurvePrivateKey:
    row = instance_settings(session)
    if row.vapid_private_key_encrypted is None:
        fresh = ec.generate_private_key(ec.SECP256R1())
        session.execute(
            sa.update(InstanceSettings)
            .where(InstanceSettings.id == row.id,
                   InstanceSettings.vapid_private_key_encrypted.is_(None))
            .values(vapid_private_key_encrypted=secrets_box.seal(raw(fresh), app))
        )
        session.commit()
        row = session.get_one(InstanceSettings, 1, populate_existing=True)
    sealed = row.vapid_private_key_encrypted
    assert sealed is not None
    return parse(secrets_box.unseal(sealed, app))


def subject(fallback_url: str | None) -> str:
    """The VAPID ``sub`` claim: the setting, else the origin of the wiki's address."""
    given: str | None = config("VAPID_SUBJECT")
    if given:
        return given
    host = urlsplit(fallback_url or "").hostname or "localhost"
    return f"https://{host}"


def authorization(key: ec.EllipticCurvePrivateKey, endpoint_url: str, sub: str) -> str:
    """The ``Authorization: vapid t=…, k=…`` header for a request to ``endpoint_url``
    (RFC 8292: its audience is the push service's origin)."""
    from py_vapid import Vapid02

    parts = urlsplit(endpoint_url)
    claims = {"aud": f"{parts.scheme}://{parts.netloc}", "sub": sub,
              "exp": int(time.time()) + SIGNATURE_LIFETIME}
    header: str = Vapid02(key).sign(claims)["Authorization"]
    return header
