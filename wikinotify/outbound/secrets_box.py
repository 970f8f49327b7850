"""Secrets at rest: webhook signing secrets and chat targets, sealed with Fernet.

The key is derived (HKDF-SHA256) from the app's ``SECRET_KEY``, so there is no second key
to provision or lose. Flask's ``SECRET_KEY_FALLBACKS`` derive the older keys a
:class:`~cryptography.fernet.MultiFernet` still opens: after a rotation of the instance
secret, rows sealed under the old one stay readable, and are sealed under the new one as
they are next written.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import Flask, current_app

from ..config import ConfigError

#: HKDF's ``info``: a key derived for these secrets is useless for anything else the
#: instance secret protects (sessions, CSRF tokens).
INFO = b"wikinotify endpoint secrets"


def missing_key(app: Flask) -> str | None:
    """Why ``app`` can neither seal nor open endpoint secrets (no ``SECRET_KEY``, or an
    empty one), as a start-up error's clause; None when it can. The web and the workers
    refuse by this one rule, each adding its own fix."""
    if app.config.get("SECRET_KEY"):
        return None
    return ("has no SECRET_KEY, from which wikinotify derives the key that seals webhook "
            "secrets and chat targets")


class Unreadable(ValueError):
    """A sealed value no current or fallback key opens (the instance secret changed
    without keeping the old one in ``SECRET_KEY_FALLBACKS``)."""


def derive(secret: str | bytes, info: bytes = INFO) -> Fernet:
    """The Fernet key HKDF derives from ``secret`` for ``info``: each use of the instance
    secret names its own ``info``, and a key derived for one opens nothing of another."""
    material = secret.encode() if isinstance(secret, str) else secret
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(material)
    return Fernet(base64.urlsafe_b64encode(key))


def _box(app: Flask | None = None) -> MultiFernet:
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    if (missing := missing_key(app)) is not None:
        raise ConfigError(f"The app {missing}: set app.config['SECRET_KEY'] to a long "
                          "random value.")
    config = app.config
    fallbacks = config.get("SECRET_KEY_FALLBACKS") or []
    return MultiFernet([derive(config["SECRET_KEY"]),
                        *(derive(key) for key in fallbacks if key)])


def seal(plaintext: str, app: Flask | None = None) -> bytes:
    """``plaintext`` encrypted and authenticated under the current key."""
    return _box(app).encrypt(plaintext.encode())


def unseal(token: bytes, app: Flask | None = None) -> str:
    """What :func:`seal` sealed, under the current key or a fallback one."""
    try:
        return _box(app).decrypt(bytes(token)).decode()
    except InvalidToken:
        raise Unreadable("no configured key opens this secret") from None
