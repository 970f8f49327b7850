"""One-click unsubscribe tokens (docs/rules.md#one-click-unsubscribe): ``{v: 1, u: user id, c:
[categories]}`` signed with HMAC-SHA256 under the instance's own unsubscribe secret, never expiring.

The secret is not the app's ``SECRET_KEY``: that one is rotated to end every session, and
that must not break the unsubscribe links already sitting in people's mailboxes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from itsdangerous import BadData, URLSafeSerializer

SALT = "wikinotify.unsubscribe"
VERSION = 1


@dataclass(frozen=True)
class Unsubscribe:
    user_id: str
    categories: tuple[str, ...]


class BadToken(ValueError):
    """A token that is not one of ours; deliberately says nothing about which part failed."""


def _serializer(secret: bytes) -> URLSafeSerializer:
    return URLSafeSerializer(
        secret, salt=SALT, signer_kwargs={"digest_method": hashlib.sha256}
    )


def make_token(secret: bytes, user_id: str, categories: list[str] | tuple[str, ...]) -> str:
    payload = {"v": VERSION, "u": str(user_id), "c": sorted(set(categories))}
    return _serializer(secret).dumps(payload)


def read_token(secret: bytes, token: str) -> Unsubscribe:
    """The token's user and categories; :class:`BadToken` for anything else.

    itsdangerous compares signatures in constant time (``hmac.compare_digest``).
    """
    try:
        payload = _serializer(secret).loads(token or "")
    except BadData:
        raise BadToken() from None
    if not (
        isinstance(payload, dict)
        and payload.get("v") == VERSION
        and isinstance(payload.get("u"), str)
        and isinstance(payload.get("c"), list)
        and all(isinstance(c, str) for c in payload["c"])
    ):
        raise BadToken()
    return Unsubscribe(payload["u"], tuple(payload["c"]))
