"""A Web Push service on 127.0.0.1 for the push tests, and the browsers that subscribe to it.

It is the test receiver (:mod:`tests.helpers.receiver`: a real HTTP server, answering each
path as the test says) plus what a push service and a browser do with a push: the service
checks the VAPID signature (RFC 8292) against the key the wiki serves, with py_vapid; the
browser decrypts the payload (RFC 8291, aes128gcm) with its subscription's private key,
with http_ece.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import http_ece
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from tests.helpers.receiver import Received, Receiver


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """One browser's subscription: its push URL and its keys, as ``toJSON()`` gives them."""

    url: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes

    @property
    def path(self) -> str:
        return "/" + self.url.split("/", 3)[3]

    def subscription(self) -> dict[str, Any]:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return {"endpoint": self.url, "expirationTime": None,
                "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)}}

    def decrypt(self, request: Received) -> dict[str, Any]:
        """The push ``request`` carried, decrypted as this browser would."""
        assert request.headers.get("Content-Encoding") == "aes128gcm"
        plain = http_ece.decrypt(request.body, private_key=self.private_key,
                                 auth_secret=self.auth, version="aes128gcm")
        return json.loads(plain)


class PushService(Receiver):
    """A push service: every push it receives must carry a valid VAPID signature by
    ``public_key`` (set by the test from ``GET /api/push/key``), for its own origin."""

    public_key: str | None = None

    def browser(self, name: str) -> Browser:
        return Browser(self.url(f"/push/{name}"), ec.generate_private_key(ec.SECP256R1()),
                       os.urandom(16))

    def check_vapid(self, request: Received) -> dict[str, Any]:
        """The VAPID claims of ``request``, after checking its signature and key."""
        auth = request.headers["Authorization"]
        scheme, _, params = auth.partition(" ")
        assert scheme == "vapid"
        parts = dict(part.split("=", 1) for part in params.split(","))
        assert parts["k"] == self.public_key, "signed with another key than the wiki serves"
        assert Vapid02.verify(auth), "the VAPID signature does not verify"
        claims = json.loads(unb64url(parts["t"].split(".")[1]))
        assert claims["aud"] == f"http://127.0.0.1:{self.port}"
        assert time.time() < claims["exp"] <= time.time() + 24 * 3600
        assert claims["sub"].startswith(("mailto:", "https://"))
        return claims

    def pushes(self, browser: Browser) -> list[dict[str, Any]]:
        """What ``browser`` was pushed, each checked and decrypted."""
        found = []
        for request in self.at(browser.path):
            self.check_vapid(request)
            found.append({"payload": browser.decrypt(request),
                          "ttl": request.headers.get("TTL"),
                          "urgency": request.headers.get("Urgency"),
                          "size": len(request.body)})
        return found
