"""What the wiki said about pages, comments and permissions, and what the site switch
said, kept in this process at their versions (docs/rules.md#kept-pages).

A page of the inbox read afresh asks the wiki, for its access re-check, about each entry's
page, comment and the reader's permissions there. Where the wiki tells wikinotify of
every change to those (``WIKINOTIFY_KEPT_PAGES``: every ``emit``, and
``notify.access_changed()``), the wiki's version, read first of all for the page, says
whether anything the wiki said may have changed since; while it has not, the same
question has the same answer. Likewise the site switch, whose change forgets everyone's
summary version. So a page read afresh because her entries changed (a read, a
dismissal, a fan-out, a mark) asks only what was not asked at those versions. The
answers are this process's, for one pair of versions at a time, for five minutes at
most (as a kept page), and for at most :data:`MOST` questions: any other version, or
older answers, and they are all forgotten.

Access is still checked every time the page is shown: what is kept is the wiki's answer
to a pure question (is this page there, as what; may members of exactly these groups do
this on a page at this path), never whether an entry may be shown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

from .host import Host, PageSnapshot
from .inbox.live import ACCOUNT_RECHECK_SECONDS

#: How many answers are kept at most (pages, comments, permissions together).
MOST = 20_000


class Said:
    """What was said at one version, until a time: the wiki's answers, and the site
    switches (wikinotify's own, which everyone's summary version in the same version
    string answers for)."""

    def __init__(self, version: str, until: float) -> None:
        self.version = version
        self.until = until
        self.pages: dict[str, PageSnapshot | None] = {}
        self.comments: dict[str, bool] = {}
        self.held: dict[tuple[Any, ...], bool] = {}
        self.switches: dict[str | None, bool] = {}

    def size(self) -> int:
        return len(self.pages) + len(self.comments) + len(self.held) + len(self.switches)

    def host(self, host: Host) -> Host:
        """``host``, its answers about pages, comments and permissions kept here."""
        # A Host to whoever asks it: the rest of its methods are the wiki's own.
        return cast(Host, _Kept(host, self))

    def site_enabled(self, site_id: str | None, read: Callable[[], bool]) -> bool:
        """The site's switch as ``read`` reads it, once at this version."""
        if site_id not in self.switches:
            self.switches[site_id] = read()
        return self.switches[site_id]


class WikiSaid:
    """One app's answers, at the latest version asked about (``State.wiki_said``)."""

    def __init__(self) -> None:
        self._said: Said | None = None
        self._lock = threading.Lock()

    def at(self, version: str) -> Said:
        """What was said at ``version`` (everyone's summary version and the wiki's, read
        before anything the page is made of), in this process; nothing if any other
        version was asked about since."""
        now = time.monotonic()
        with self._lock:
            said = self._said
            if (said is None or said.version != version or now >= said.until
                    or said.size() > MOST):
                # At most a kept page's age, should the wiki's forget after a change
                # not have reached Redis.
                said = self._said = Said(version, now + ACCOUNT_RECHECK_SECONDS)
        return said


class _Kept:
    """A host whose answers about pages, comments and permissions are kept at one version;
    everything else is the host's own."""

    def __init__(self, host: Host, answers: Said) -> None:
        self._host = host
        self._answers = answers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def pages(self, page_ids: Sequence[str]) -> Mapping[str, PageSnapshot]:
        known = self._answers.pages
        missing = [page_id for page_id in page_ids if page_id not in known]
        if missing:
            found = self._host.pages(missing)
            for page_id in missing:
                known[page_id] = found.get(page_id)
        return {page_id: page for page_id in page_ids
                if (page := known.get(page_id)) is not None}

    def comments_exist(self, comment_ids: Sequence[str]) -> set[str]:
        known = self._answers.comments
        missing = [comment_id for comment_id in comment_ids if comment_id not in known]
        if missing:
            found = self._host.comments_exist(missing)
            for comment_id in missing:
                known[comment_id] = comment_id in found
        return {comment_id for comment_id in comment_ids if known.get(comment_id)}

    def held_permissions(
        self, group_ids: frozenset[str], permissions: Collection[str], pages: Sequence[PageSnapshot]
    ) -> dict[str, set[str]]:
        known = self._answers.held
        # By the whole snapshot (a page gone is checked as its entry remembers it), as
        # text: a snapshot may hold lists and mappings.
        keys = {page["id"]: (group_ids, repr(sorted(page.items()))) for page in pages}
        unknown = [page for page in pages
                   if any((*keys[page["id"]], p) not in known for p in permissions)]
        if unknown:
            found = self._host.held_permissions(group_ids, permissions, unknown)
            for page in unknown:
                held = found.get(page["id"], set())
                for p in permissions:
                    known[(*keys[page["id"]], p)] = p in held
        return {page["id"]: {p for p in permissions if known.get((*keys[page["id"]], p))}
                for page in pages}
