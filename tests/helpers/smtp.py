"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps what it receives, and can be
told to answer as a troubled relay does: slowly, "slow down", a 5xx for one address, or
refusing a login. And a relay that accepts connections and never answers."""

from __future__ import annotations

import asyncio
import email
import email.policy
import socket
from collections.abc import Callable
from email.message import EmailMessage

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.helpers.relay import Relay


class Inbox:
    def __init__(self) -> None:
        self.raw: list[bytes] = []
        #: Seconds each message takes to be accepted (a slow relay); the message counts as
        #: received as soon as its data is in, before the wait.
        self.delay = 0.0
        #: A reply to every DATA instead of accepting it, e.g. "451 4.7.1 Slow down".
        self.reply: str | None = None
        #: Replies to RCPT TO for these addresses, e.g. {"carol@…": "550 5.1.1 No such user"}.
        self.refuse: dict[str, str] = {}
        #: Called with each message as it is received, before the relay answers (a
        #: fault that strikes the sender while the relay has its mail).
        self.on_message: Callable[[bytes], None] | None = None

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self.reply is not None:
            return self.reply
        self.raw.append(envelope.original_content or envelope.content)
        if self.on_message is not None:
            self.on_message(self.raw[-1])
        await asyncio.sleep(self.delay)
        return "250 OK"

    @property
    def recipients(self) -> list[str]:
        """The To of every message received, in order."""
        return [message["To"] for message in self.messages]

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
    """Start, stop and start again on the same port (to test an outage). With
    ``login``, the server offers AUTH and accepts only that (username, password)."""

    def __init__(self, login: tuple[str, str] | None = None) -> None:
        self.inbox = Inbox()
        self.port = free_port()
        self.login = login
        self.controller: Controller | None = None

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and self.login == (
            auth_data.login.decode(), auth_data.password.decode())
        return AuthResult(success=ok, handled=False)  # handled: aiosmtpd sends the 535

    def start(self) -> None:
        options = {}
        if self.login is not None:
            options = {"authenticator": self._authenticate, "auth_require_tls": False}
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port,
                                     **options)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


class HangingServer(Relay):
    """Accepts connections on 127.0.0.1 and never says a word (a hung relay)."""

    def __init__(self) -> None:
        super().__init__(None, holding=True)

    @property
    def accepted(self) -> list[socket.socket]:
        return self.held
