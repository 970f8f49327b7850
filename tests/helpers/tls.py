"""TLS for servers the tests start on 127.0.0.1: a certificate authority of the tests' own
(trustme), a certificate it issued for the server, and a client context trusting it."""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import trustme

HOST = "127.0.0.1"


@functools.cache
def authority() -> trustme.CA:
    """One authority a test process: certificates it issues are trusted by
    :func:`client_context` alone."""
    return trustme.CA()


def server_files(directory: Path) -> tuple[str, str]:
    """A certificate for :data:`HOST` and its key, written in ``directory``: the paths a
    server's ``--certfile`` and ``--keyfile`` take."""
    issued = authority().issue_cert(HOST)
    cert, key = directory / "server.pem", directory / "server.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for more in issued.cert_chain_pems[1:]:
        more.write_to_path(str(cert), append=True)
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def client_context() -> ssl.SSLContext:
    """A client's context that verifies the server against :func:`authority`."""
    context = ssl.create_default_context()
    authority().configure_trust(context)
    return context
