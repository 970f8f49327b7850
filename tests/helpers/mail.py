"""Reading the mail the real SMTP server received."""

from __future__ import annotations

import email
import email.policy
import re
from email.header import decode_header, make_header


def parse(raw: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)


def bodies(message) -> tuple[str, str]:
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    return text, html


#: RFC 2047: an encoded word is at most 75 characters.
ENCODED_WORD = re.compile(rb"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=")


def read_list_id(raw: bytes) -> tuple[str, str]:
    """The List-Id's phrase and identifier, read by the stdlib's RFC 5322 parser: the
    identifier is given an ``@`` so the header parses as a ``To`` would. RFC 2047 words
    are decoded by ``decode_header``, which drops the folding between adjacent words as
    RFC 2047 says (the address parser keeps a space there)."""
    unfolded = re.search(rb"^List-Id:(.*?)\r\n(?! )", raw, re.M | re.S).group(1)
    unfolded = unfolded.replace(b"\r\n", b"")
    phrase, _, identifier = unfolded.decode("ascii").rpartition("<")
    probe = f"To: {phrase}<x@{identifier}\r\n\r\n".encode("ascii")
    [address] = parse(probe)["To"].addresses
    assert address.addr_spec == f"x@{identifier.rstrip('>').strip()}"
    if "=?" in phrase:
        return str(make_header(decode_header(phrase.strip()))), identifier.rstrip(">").strip()
    return address.display_name, identifier.rstrip(">").strip()
