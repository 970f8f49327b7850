"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps what it receives."""

from __future__ import annotations

import email
import email.policy
import socket
from email.message import EmailMessage

from aiosmtpd.controller import Controller


class Inbox:
    def __init__(self) -> None:
        self.raw: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):
        self.raw.append(envelope.original_content or envelope.content)
        return "250 OK"

    @property
    def messages(self) -> list[EmailMessage]:
        return [
            email.message_from_bytes(raw, policy=email.policy.default) for raw in self.raw
        ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SmtpServer:
    """Start, stop and start again on the same port (to test an outage)."""

    def __init__(self) -> None:
        self.inbox = Inbox()
        self.port = free_port()
        self.controller: Controller | None = None

    def start(self) -> None:
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
