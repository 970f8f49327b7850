"""The signed links of a mail (docs/rules.md#one-click-unsubscribe): one scheme, a token per
purpose, each signed with HMAC-SHA256 under the instance's own unsubscribe secret, with the
purpose's own salt (a token of one purpose is no token of another), never expiring.

- unsubscribe: ``{v: 1, u: user id, c: [categories]}``
- mute (a page, from its mail): ``{v: 1, p: "mute", u: user id, g: page id}``

The secret is not the app's ``SECRET_KEY``: that one is rotated to end every session, and
that must not break the links already sitting in people's mailboxes. The same secret keys
the mail's thread ids (:func:`thread_key`), so they reveal nothing of reader or page.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadData, URLSafeSerializer

VERSION = 1
#: Each purpose's salt. Unsubscribe's is the one its tokens were always signed with.
SALTS = {"unsubscribe": "wikinotify.unsubscribe", "mute": "wikinotify.mute"}


@dataclass(frozen=True)
class Unsubscribe:
    user_id: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class MutePage:
    user_id: str
    page_id: str


class BadToken(ValueError):
    """A token that is not one of ours; deliberately says nothing about which part failed."""


def _serializer(secret: bytes, purpose: str) -> URLSafeSerializer:
    return URLSafeSerializer(
        secret, salt=SALTS[purpose], signer_kwargs={"digest_method": hashlib.sha256}
    )


def _sign(secret: bytes, purpose: str, user_id: str, **fields: Any) -> str:
    # Unsubscribe's tokens never carried their purpose (links already mailed must keep
    # working); every newer purpose names itself, as well as signing under its own salt.
    named = {} if purpose == "unsubscribe" else {"p": purpose}
    return _serializer(secret, purpose).dumps({"v": VERSION, **named, "u": str(user_id),
                                               **fields})


def _read(secret: bytes, purpose: str, token: str) -> dict[str, Any]:
    """The token's payload, signed for ``purpose``; :class:`BadToken` for anything else.

    itsdangerous compares signatures in constant time (``hmac.compare_digest``).
    """
    try:
        payload = _serializer(secret, purpose).loads(token or "")
    except BadData:
        raise BadToken() from None
    named = None if purpose == "unsubscribe" else purpose
    if not (isinstance(payload, dict) and payload.get("v") == VERSION
            and payload.get("p") == named and isinstance(payload.get("u"), str)):
        raise BadToken()
    return payload


def make_token(secret: bytes, user_id: str, categories: list[str] | tuple[str, ...]) -> str:
    return _sign(secret, "unsubscribe", user_id, c=sorted(set(categories)))


def read_token(secret: bytes, token: str) -> Unsubscribe:
    """The unsubscribe token's user and categories; :class:`BadToken` for anything else."""
    payload = _read(secret, "unsubscribe", token)
    categories = payload.get("c")
    if not (isinstance(categories, list) and all(isinstance(c, str) for c in categories)):
        raise BadToken()
    return Unsubscribe(payload["u"], tuple(categories))


def make_mute_token(secret: bytes, user_id: str, page_id: str) -> str:
    return _sign(secret, "mute", user_id, g=str(page_id))


def read_mute_token(secret: bytes, token: str) -> MutePage:
    """The mute token's user and page; :class:`BadToken` for anything else."""
    payload = _read(secret, "mute", token)
    if not isinstance(payload.get("g"), str):
        raise BadToken()
    return MutePage(payload["u"], payload["g"])


def thread_key(secret: bytes, user_id: str, site_id: str, page_id: str) -> str:
    """The hex id of the mail thread of one reader about one page of one site: stable,
    and without the secret nobody can tell whose or which page's it is."""
    message = "\0".join(("thread", str(user_id), str(site_id), str(page_id))).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]
