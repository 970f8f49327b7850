"""A notification mail's bytes written out directly: the very bytes the email package
writes for it (:meth:`.compose.NotificationMessage.mime`), in a tenth of the time.

A mail is always the same shape: its headers, then ``multipart/alternative`` with a text
and an HTML part in UTF-8. The email package builds a tree of message objects for it,
picks each part's transfer encoding, quoted-printable-encodes it with a translation
table (``str.translate`` looks each character up in a dict: half the cost of a digest's
MIME) and walks the tree to write it: a millisecond a digest, on the drain's one thread
that builds every mail. Here the same choices are made, in the same order, on strings
(:func:`encode_text` is ``email.contentmanager``'s heuristic), and the encoding escapes
only what needs it, line by line.

:func:`written` answers ``None`` for what it does not write exactly as the package would
(a header the package would encode or fold, a body that needs base64, a body holding the
boundary): the caller has the package write those. ``tests/test_mail_wire.py`` holds the
two to the same bytes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from email import quoprimime

#: The build policy's ``max_line_length`` (the standard 78), which decides a part's
#: transfer encoding and folds its quoted-printable lines.
_BODY_LINE_LIMIT = 78
#: A body quoted-printable writes as it is (``quoprimime``'s body map, and line breaks):
#: printable ASCII but ``=``, the space and the tab (but at the end of a line).
_PLAIN = re.compile(r"[\t\n !-<>-~]*")
#: A character it escapes, once each ``=`` is escaped (``=3D``).
_ESCAPE = re.compile(r"[^\t\n -~]")
_ESCAPED = {chr(octet): f"={octet:02X}" for octet in range(256)}
#: The line breaks ``quoprimime.body_encode`` splits on, once its table has escaped the
#: other characters ``str.splitlines`` would break at.
_LINE_BREAK = re.compile(r"\r\n|\r")


@functools.cache
def _to_break(limit: int) -> re.Pattern[str]:
    """An escaped line quoted-printable breaks: longer than ``limit``, or ending in white
    space (which it escapes)."""
    return re.compile(rf"^(?:[^\n]{{{limit + 1},}}|[^\n]*[ \t])$", re.MULTILINE)


def quoted_printable(body: str, limit: int) -> str:
    """``quoprimime.body_encode(body, limit)``, to the character, for a body of Latin-1
    characters (UTF-8 read as Latin-1). It escapes with ``str.translate`` and a table,
    which looks each character up in a dict (50 ns a character: most of a digest's
    encoding), then walks every line in Python. Here the escapes are made by the
    pattern engine, and only the lines to break are walked."""
    if "\r" in body:
        body = _LINE_BREAK.sub("\n", body)
    if not _PLAIN.fullmatch(body):
        body = _ESCAPE.sub(lambda char: _ESCAPED[char[0]], body.replace("=", "=3D"))
    return _to_break(limit).sub(lambda line: _broken(line[0], limit), body)


def _broken(line: str, limit: int) -> str:
    """An escaped line longer than ``limit``, or ending in white space, as
    ``quoprimime.body_encode`` writes it: in pieces of at most ``limit`` characters
    with their soft breaks, an escape never split, white space at its end escaped."""
    pieces = []
    start = 0
    last_start = len(line) - 1 - limit
    while start <= last_start:
        stop = start + limit - 1
        if line[stop - 2] == "=":
            pieces.append(line[start:stop - 1])
            start = stop - 2
        elif line[stop - 1] == "=":
            pieces.append(line[start:stop])
            start = stop - 1
        else:
            pieces.append(line[start:stop] + "=")
            start = stop
    if line and line[-1] in " \t":
        room = start - last_start
        if room >= 3:  # room for the escape
            tail = quoprimime.quote(line[-1])
        elif room == 2:  # for the white space and a soft break
            tail = line[-1] + "=\n"
        else:  # for a soft break only: the escape goes on a line of its own
            tail = "=\n" + quoprimime.quote(line[-1])
        pieces.append(line[start:-1] + tail)
    else:
        pieces.append(line[start:])
    return "\n".join(pieces)


def encode_text(text: str, linesep: str = "\r\n") -> tuple[str, str] | None:
    """``email.contentmanager``'s choice of transfer encoding for ``text`` in UTF-8 under
    the build policy (7-bit, 78 characters), and the payload it writes: ``7bit`` if every
    line is short ASCII, else quoted-printable if its first ten lines come out no longer
    than in base64. ``None`` where it would choose base64 (the package writes that)."""
    lines = text.encode("utf-8").splitlines()
    if max(map(len, lines), default=0) <= _BODY_LINE_LIMIT:
        try:
            return "7bit", (b"\n".join(lines) + b"\n").decode("ascii")
        except UnicodeDecodeError:
            pass
    sniffed = (linesep.encode("ascii").join(lines[:10]) + linesep.encode("ascii"))
    sniff = quoted_printable(sniffed.decode("latin-1"), _BODY_LINE_LIMIT)
    if len(sniff) > _base64_length(len(sniffed)):
        return None
    if len(lines) <= 10:
        return "quoted-printable", sniff
    body = (b"\n".join(lines) + b"\n").decode("latin-1")
    return "quoted-printable", quoted_printable(body, _BODY_LINE_LIMIT)


def _base64_length(size: int) -> int:
    """The length of ``binascii.b2a_base64`` of ``size`` bytes (its newline included)."""
    return 4 * ((size + 2) // 3) + 1


def written(headers: Iterable[str], text: str, html: str, boundary: str) -> bytes | None:
    """The mail: ``headers`` (each as the wire policy folds it, its CRLF included), then
    the text and HTML parts under ``boundary``, as ``NotificationMessage.mime()`` is
    written (``as_bytes(policy=_WIRE)``); ``None`` where this would not write those very
    bytes."""
    parts = []
    for subtype, content in (("plain", text), ("html", html)):
        if boundary in content:
            return None
        encoded = encode_text(content)
        if encoded is None:
            return None
        cte, payload = encoded
        parts.append((subtype, cte, payload))
    out = list(headers)
    out.append("MIME-Version: 1.0\r\n"
               f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n')
    for n, (subtype, cte, payload) in enumerate(parts):
        # The package's quirk, kept: the HTML part, made as a message of its own, is
        # given a MIME-Version of its own.
        version = "MIME-Version: 1.0\r\n" if n else ""
        out.append(f"--{boundary}\r\n"
                   f'Content-Type: text/{subtype}; charset="utf-8"\r\n'
                   f"Content-Transfer-Encoding: {cte}\r\n{version}\r\n"
                   f"{payload.replace(chr(10), chr(13) + chr(10))}\r\n")
    out.append(f"--{boundary}--\r\n")
    return "".join(out).encode("ascii")

