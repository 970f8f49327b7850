"""Optional DKIM signing of notification mail (``pip install wikinotify[dkim]``).

Gmail and Yahoo honour one-click unsubscribe only when both ``List-Unsubscribe`` headers
are covered by the DKIM signature (docs/rules.md#one-click-unsubscribe), so they are always among
the signed ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from flask import Flask

from ..config import ConfigError

#: The headers signed: the identity of the mail, the two one-click headers, and the list
#: the mail belongs to (which filters sort it by).
SIGNED_HEADERS = (
    b"From",
    b"To",
    b"Subject",
    b"Date",
    b"Message-ID",
    b"MIME-Version",
    b"Content-Type",
    b"List-Unsubscribe",
    b"List-Unsubscribe-Post",
    b"Auto-Submitted",
    b"List-Id",
)
SETTINGS = ("WIKINOTIFY_DKIM_SELECTOR", "WIKINOTIFY_DKIM_DOMAIN", "WIKINOTIFY_DKIM_PRIVATE_KEY")


@dataclass(frozen=True)
class DkimKey:
    selector: bytes
    domain: bytes
    private_key: bytes

    def sign(self, message: bytes) -> bytes:
        """The ``DKIM-Signature:`` header line(s) for ``message``, to put in front of it."""
        import dkim  # optional: only a wiki that configured a key needs dkimpy

        signature: bytes = dkim.sign(
            message,
            self.selector,
            self.domain,
            self.private_key,
            include_headers=list(SIGNED_HEADERS),
        )
        return signature


def load(app: Flask) -> DkimKey | None:
    """The configured key, ``None`` when DKIM is off; a half-configured or unreadable
    key stops the app at start-up, naming the setting."""
    values: dict[str, str | None] = {name: app.config.get(name) for name in SETTINGS}
    if not any(values.values()):
        return None
    selector, domain, key = (values[name] for name in SETTINGS)
    if not (selector and domain and key):
        missing = [name for name, value in values.items() if not value]
        raise ConfigError(
            f"DKIM signing needs {', '.join(missing)} as well (or none of the three)."
        )
    try:
        import dkim  # noqa: F401
    except ImportError:
        raise ConfigError(
            "WIKINOTIFY_DKIM_* is set but dkimpy is not installed: pip install 'wikinotify[dkim]'."
        ) from None
    if "PRIVATE KEY-----" not in key:
        if not os.path.exists(key):
            raise ConfigError(
                "WIKINOTIFY_DKIM_PRIVATE_KEY is neither a PEM key nor the path of a file."
            )
        with open(key, encoding="ascii") as handle:
            key = handle.read()
    return DkimKey(
        selector=selector.encode(),
        domain=domain.encode(),
        private_key=key.encode(),
    )
