"""The demo's SMTP sink and the mailbox it fills.

``flask --app wsgi demo run`` receives the wiki's mail on 127.0.0.1 (aiosmtpd) and keeps
every message, raw, as one ``.eml`` file in ``DEMO_MAILBOX``; ``/demo/mailbox`` reads them
back. A real instance hands its mail to an SMTP relay instead: nothing here is wikinotify.
"""

from __future__ import annotations

import asyncio
import email.policy
import os
import re
import time
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from aiosmtpd.controller import Controller

#: The page shows the newest messages only, so an old demo stays quick to open.
SHOWN = 100

#: A ``List-Unsubscribe`` target: ``<https://…>, <mailto:…>`` (RFC 2369).
_TARGET = re.compile(r"<([^<>]*)>")
_ONE_CLICK = "List-Unsubscribe=One-Click"


class MailboxHandler:
    """aiosmtpd's handler: accepts every message and writes it whole to ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._last = 0

    def _next_stem(self) -> str:
        # Called on the sink's one event loop: each stem is later than the one before, so
        # sorting the files by name sorts them by arrival, and no two messages share one.
        self._last = max(time.time_ns(), self._last + 1)
        return f"{self._last:020d}"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        stem = self._next_stem()
        # In a thread, so a slow disk does not hold up the SMTP conversation.
        await asyncio.to_thread(store, self.folder, stem, envelope.original_content)
        return "250 Message accepted for delivery"


def store(folder: str, stem: str, data: bytes) -> Path:
    """Write one message as ``<stem>.eml``; written under another name first and renamed,
    so the page never reads half a message."""
    os.makedirs(folder, exist_ok=True)
    partial = Path(folder, stem + ".part")
    partial.write_bytes(data)
    return partial.replace(Path(folder, stem + ".eml"))


def start_sink(folder: str, host: str, port: int) -> Controller:
    """Start the sink in a thread of this process; ``stop()`` it on the way out."""
    # Imported here: aiosmtpd is needed by `demo run` only, not to serve the mailbox page.
    from aiosmtpd.controller import Controller

    os.makedirs(folder, exist_ok=True)
    # A fixed name for the greeting: the default looks up this machine's FQDN, which can
    # stall on a host without working DNS.
    controller = Controller(
        MailboxHandler(folder), hostname=host, port=port, server_hostname="localhost"
    )
    controller.start()
    return controller


# -- reading --------------------------------------------------------------------------------


def _names(folder: str) -> list[str]:
    try:
        return sorted((n for n in os.listdir(folder) if n.endswith(".eml")), reverse=True)
    except FileNotFoundError:
        return []  # the sink has not run yet


def list_messages(folder: str, limit: int = SHOWN) -> list[dict[str, Any]]:
    """The newest ``limit`` messages in ``folder``, newest first, parsed for display."""
    messages = []
    for name in _names(folder)[:limit]:
        try:
            messages.append(_read(Path(folder, name)))
        except FileNotFoundError:
            continue  # cleared by another request meanwhile
    return messages


def clear_messages(folder: str) -> int:
    """Delete every stored message; how many there were."""
    count = 0
    for name in _names(folder):
        Path(folder, name).unlink(missing_ok=True)
        count += 1
    return count


def _read(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    message = BytesParser(policy=email.policy.default).parsebytes(raw)
    url = unsubscribe_url(message.get("List-Unsubscribe", ""))
    return {
        "id": path.stem,
        "subject": str(message.get("Subject", "")),
        "sender": str(message.get("From", "")),
        "recipients": str(message.get("To", "")),
        "date": str(message.get("Date", "")),
        # Decoded (RFC 2047), as a reader sees them; "source" has them as they were sent.
        "headers": [(name, str(value)) for name, value in message.items()],
        "source": raw.decode("utf-8", errors="replace"),
        "text": _body(message, "plain"),
        "html": _body(message, "html"),
        "unsubscribe_url": url,
        "unsubscribe_path": site_relative(url) if url else None,
        # A mail client offers one-click only when the header says exactly this (RFC 8058).
        "one_click": str(message.get("List-Unsubscribe-Post", "")).strip() == _ONE_CLICK,
    }


def _body(message: EmailMessage, subtype: str) -> str | None:
    part = message.get_body(preferencelist=(subtype,))
    if part is None:
        return None
    try:
        return part.get_content()
    except (LookupError, UnicodeDecodeError):  # an unknown or lying charset
        payload = part.get_payload(decode=True) or b""
        return payload.decode("utf-8", errors="replace")


def unsubscribe_url(header: str) -> str | None:
    """The first http(s) target of a ``List-Unsubscribe`` header: the one RFC 8058's POST
    goes to (a ``mailto:`` target is for clients without one-click)."""
    for target in _TARGET.findall(header):
        target = target.strip()
        if urlsplit(target).scheme in ("https", "http"):
            return target
    return None


def site_relative(url: str) -> str:
    """``url`` without its scheme and host. The mail's links name the site's configured
    base URL (http://localhost:5000), while the demo may be browsed at 127.0.0.1 or on
    another port: the page posts to the server it came from."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
