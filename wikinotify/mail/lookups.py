"""What one mail run asks the wiki, asked once (:class:`RunLookups`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from ..host import Host, PageSnapshot, SiteFacts


class RunLookups:
    """The host as one run's mails ask it: :meth:`Host.site` answered once per run for
    each site, :meth:`Host.pages` and :meth:`Host.held_permissions` once for each page, and
    for each (group set, permission, page); everything else is the host's own. A run lasts
    seconds, and every mail of it about one page, to readers of one group set, asks the
    same questions: the wiki answered them once, when the run first needed them."""

    def __init__(self, host: Host, last_sites: Mapping[str, str] | None = None) -> None:
        self._host = host
        #: The site each reader of an instance-scoped mail last signed in on.
        self.last_sites = last_sites or {}
        self._sites: dict[str, SiteFacts | None] = {}
        self._pages: dict[str, PageSnapshot | None] = {}
        self._held: dict[tuple[frozenset[str], str, str, Any], bool] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def site(self, site_id: str) -> SiteFacts | None:
        if site_id not in self._sites:
            self._sites[site_id] = self._host.site(site_id)
        return self._sites[site_id]

    def site_for(self, user_id: str, site_id: str | None) -> SiteFacts | None:
        """The entry's site. Instance-scoped entries go out with the site the reader last
        signed in on (``Host.last_site_id``), else the first site: a reader the wiki
        knows no sign-in for, or whose site has gone since (docs/rules.md#the-site-switch)."""
        if site_id is not None:
            return self.site(site_id)
        last = self.last_sites.get(user_id)
        site = self.site(last) if last is not None else None
        if site is not None:
            return site
        sites = self._host.sites()
        return sites[0] if sites else None

    def pages(self, page_ids: Sequence[str]) -> Mapping[str, PageSnapshot]:
        missing = [i for i in page_ids if i not in self._pages]
        if missing:
            found = self._host.pages(missing)
            self._pages.update({i: found.get(i) for i in missing})
        return {i: page for i in page_ids if (page := self._pages[i]) is not None}

    def held_permissions(
        self, group_ids: frozenset[str], permissions: Collection[str],
        pages: Sequence[PageSnapshot],
    ) -> dict[str, set[str]]:
        # The path is part of the key: a page that moved is another question.
        def key(permission: str, page: PageSnapshot) -> tuple[frozenset[str], str, str, Any]:
            return group_ids, permission, page["id"], page.get("path")

        unasked = [page for page in pages
                   if any(key(p, page) not in self._held for p in permissions)]
        if unasked:
            held = self._host.held_permissions(group_ids, permissions, unasked)
            for page in unasked:
                for permission in permissions:
                    self._held[key(permission, page)] = permission in held.get(page["id"], ())
        return {page["id"]: {p for p in permissions if self._held[key(p, page)]}
                for page in pages}

    def as_host(self) -> Host:
        """This, where a :class:`Host` is asked for (it answers all a host does)."""
        return cast(Host, self)
