"""Who may do what on a page, and who a comment mentions: pure functions, no database.

A group starts from its own permissions. Its page rules whose prefix starts the page path
then apply from the shortest prefix to the longest, so the most specific rule has the last
word: a deny rule removes its permissions, an allow rule adds them. A person holds a
permission when any one of their groups does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple


class Rule(NamedTuple):
    path_prefix: str
    permissions: frozenset[str]
    deny: bool


class Grant(NamedTuple):
    """One group as the permission check sees it."""

    permissions: frozenset[str]
    rules: tuple[Rule, ...] = ()


def group_permissions(grant: Grant, page_path: str) -> set[str]:
    """The permissions one group holds on ``page_path``."""
    held = set(grant.permissions)
    matching = [rule for rule in grant.rules if page_path.startswith(rule.path_prefix)]
    # Sorted by prefix length; on equal prefixes a deny comes last, so it wins.
    for rule in sorted(matching, key=lambda rule: (len(rule.path_prefix), rule.deny)):
        if rule.deny:
            held -= rule.permissions
        else:
            held |= rule.permissions
    return held


def holds(groups_with_rules: Iterable[Grant], permission: str, page_path: str) -> bool:
    """Whether members of these groups hold ``permission`` on ``page_path``."""
    return any(permission in group_permissions(g, page_path) for g in groups_with_rules)


#: ``@handle``: not glued to a word before it (so ``bob@example.com`` mentions no one),
#: and not ending in ``.`` or ``-`` (so "thanks @bob." mentions bob).
MENTION = re.compile(r"(?<![A-Za-z0-9_.@-])@([A-Za-z0-9_.-]*[A-Za-z0-9_])")


def mentioned_handles(text: str) -> list[str]:
    """The handles written as ``@handle`` in ``text``, lower-cased, each once, in the
    order they are first written."""
    return list(dict.fromkeys(handle.lower() for handle in MENTION.findall(text)))
