"""Plain text with its web addresses as links (docs/rules.md#announcements): an
announcement's body is plain text, and this is the only way it becomes HTML.

Everything is escaped first, so whatever the text holds (``<script>``, ``&amp;``, quotes)
shows as written; only ``http://`` and ``https://`` addresses become links, never
another scheme (``javascript:`` stays text). A link opens in the same tab, and says
``rel="nofollow noopener"``: the text is an administrator's, the address anyone's.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

#: An http(s) address up to the next space or angle bracket; punctuation that usually
#: ends a sentence is left outside the link ("see https://example.org.").
URL = re.compile(r"https?://[^\s<>\"']+", re.IGNORECASE)
TRAILING = ".,;:!?)]}"


def _link(address: str) -> str:
    kept = address.rstrip(TRAILING)
    # A ")" that closes a "(" inside the address belongs to it (Wikipedia's addresses).
    while address[len(kept):].startswith(")") and kept.count("(") > kept.count(")"):
        kept += ")"
    rest = address[len(kept):]
    return f'<a href="{escape(kept)}" rel="nofollow noopener">{escape(kept)}</a>{escape(rest)}'


def linkify(text: str) -> Markup:
    """``text`` as HTML: escaped, its http(s) addresses links, each line break a
    ``<br>``."""
    parts: list[str] = []
    end = 0
    for found in URL.finditer(text):
        parts.append(str(escape(text[end:found.start()])))
        parts.append(_link(found.group()))
        end = found.end()
    parts.append(str(escape(text[end:])))
    return Markup("<br>\n".join("".join(parts).splitlines()))
