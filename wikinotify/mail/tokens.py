"""The signed links of a mail (docs/rules.md#one-click-unsubscribe): one scheme, a token per
purpose, each signed with HMAC-SHA256 under the instance's own unsubscribe secret, with the
purpose's own salt (a token of one purpose is no token of another). The mailed ones never
expire; "Subscribe again" is not mailed and lives :data:`RESUBSCRIBE_SECONDS`.

- unsubscribe: ``{v: 1, u: user id, c: [categories]}``
- mute (a page, from its mail): ``{v: 1, p: "mute", u: user id, g: page id}``
- resubscribe (the unsubscribe confirmation's "Subscribe again" only):
  ``{v: 1, p: "resubscribe", u: user id, c: [categories]}``, timestamped. A mailed link
  must only ever turn mail off: it sits in List-Unsubscribe headers, footers, list archives
  and forwarded mail, so it must not also be able to turn mail back on.

The secret is not the app's ``SECRET_KEY``: that one is rotated to end every session, and
that must not break the links already sitting in people's mailboxes. The same secret keys
the mail's thread ids (:func:`thread_key`), so they reveal nothing of reader or page.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import zlib
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadData, Serializer, URLSafeSerializer, URLSafeTimedSerializer
from itsdangerous.encoding import base64_encode

VERSION = 1
#: Each purpose's salt. Unsubscribe's is the one its tokens were always signed with.
SALTS = {"unsubscribe": "wikinotify.unsubscribe", "mute": "wikinotify.mute",
         "resubscribe": "wikinotify.resubscribe"}
#: How long a "Subscribe again" token works: a day. Long enough to come back to the
#: confirmation tab after a slip (or the next morning); short because the page lingers
#: in browser history and shared screens, and a link that turns mail on must not outlive
#: the moment it was offered for.
RESUBSCRIBE_SECONDS = 86400
#: The purposes whose tokens expire, and after how many seconds.
MAX_AGE = {"resubscribe": RESUBSCRIBE_SECONDS}


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


def _payload(serializer: Serializer[str], obj: Any) -> bytes:
    """itsdangerous' URL-safe payload (``URLSafeSerializerMixin.dump_payload``): the JSON,
    zlib-compressed (marked by a leading ``.``) where that makes it shorter, in base64.
    Compressed with a 512-byte window: a payload is tens of bytes, and zlib's default
    state (a quarter of a megabyte, mapped and unmapped at each call) cost 45 µs a token,
    eleven tokens a digest. Any zlib stream reads back the same way."""
    json = Serializer.dump_payload(serializer, obj)
    packer = zlib.compressobj(6, zlib.DEFLATED, 9, 1)
    compressed = packer.compress(json) + packer.flush()
    if len(compressed) < len(json) - 1:
        return b"." + base64_encode(compressed)
    return base64_encode(json)


class _Serializer(URLSafeSerializer):
    dump_payload = _payload


class _TimedSerializer(URLSafeTimedSerializer):
    dump_payload = _payload


@functools.lru_cache(maxsize=16)
def _serializer(secret: bytes, purpose: str) -> URLSafeSerializer | URLSafeTimedSerializer:
    kind = _TimedSerializer if purpose in MAX_AGE else _Serializer
    return kind(secret, salt=SALTS[purpose], signer_kwargs={"digest_method": hashlib.sha256})


def _sign(secret: bytes, purpose: str, user_id: str, **fields: Any) -> str:
    # Unsubscribe's tokens never carried their purpose (links already mailed must keep
    # working); every newer purpose names itself, as well as signing under its own salt.
    named = {} if purpose == "unsubscribe" else {"p": purpose}
    return _serializer(secret, purpose).dumps({"v": VERSION, **named, "u": str(user_id),
                                               **fields})


def _loads(secret: bytes, purpose: str, token: str) -> Any:
    serializer = _serializer(secret, purpose)
    if isinstance(serializer, URLSafeTimedSerializer):
        return serializer.loads(token, max_age=MAX_AGE[purpose])
    return serializer.loads(token)


def _read(secret: bytes, purpose: str, token: str) -> dict[str, Any]:
    """The token's payload, signed for ``purpose``; :class:`BadToken` for anything else.

    itsdangerous compares signatures in constant time (``hmac.compare_digest``).
    """
    try:
        payload = _loads(secret, purpose, token or "")
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
    return _categories(_read(secret, "unsubscribe", token))


def make_resubscribe_token(secret: bytes, user_id: str,
                           categories: list[str] | tuple[str, ...]) -> str:
    return _sign(secret, "resubscribe", user_id, c=sorted(set(categories)))


def read_resubscribe_token(secret: bytes, token: str) -> Unsubscribe:
    """The "Subscribe again" token's user and categories (within
    :data:`RESUBSCRIBE_SECONDS`); :class:`BadToken` for anything else, an unsubscribe
    token included."""
    return _categories(_read(secret, "resubscribe", token))


def _categories(payload: dict[str, Any]) -> Unsubscribe:
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
