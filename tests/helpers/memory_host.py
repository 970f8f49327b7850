"""A wiki held in dictionaries: the smallest whole :class:`wikinotify.host.Host`, so the
library's rules (who is told, coalescing, preferences, access) are tested without the demo
wiki. Its rules are the ones a reader of the host interface would expect, written plainly:

- an account holds a permission on a page when one of its groups holds it there: the group
  grants it wiki-wide or by a rule whose path prefix the page's path starts with, and no
  rule of that group denies it there (within a group, a deny wins);
- the reviewers of a page are the members of the groups an approval rule names for the
  longest prefix of its path;
- an ``@handle`` names the account given that handle, the first written first.

:func:`memory_app` builds a Flask app on it: Flask-SQLAlchemy on the test's database with
wikinotify's tables only, and wikinotify on the real Redis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from wikinotify import WikiNotify
from wikinotify.host import Host, PageSnapshot, SiteFacts, UserFacts, first_batch
from wikinotify.models import Base as WikiNotifyBase

SITE = SiteFacts(id="main", base_url="https://memory.example", title="Memory wiki")
HANDLE = re.compile(r"@([a-z0-9_]+)")


@dataclass(frozen=True)
class Rule:
    """Members of ``group`` hold (or, with ``deny``, do not hold) ``permissions`` on the
    pages whose path starts with ``prefix``."""

    group: str
    prefix: str
    permissions: frozenset[str]
    deny: bool = False


@dataclass
class MemoryHost(Host):
    """The wiki: change its dictionaries in a test, and the next fan-out reads them."""

    accounts: dict[str, UserFacts] = field(default_factory=dict)
    #: Group id -> the permissions it grants wiki-wide.
    groups: dict[str, set[str]] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    #: Path prefix -> the groups whose members review the pages under it.
    approval_rules: dict[str, set[str]] = field(default_factory=dict)
    page_rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    watches: dict[str, set[str]] = field(default_factory=dict)
    handles: dict[str, str] = field(default_factory=dict)
    comment_authors: dict[str, str] = field(default_factory=dict)
    admins: set[str] = field(default_factory=set)

    # -- building the wiki -------------------------------------------------------------

    def add_account(self, user_id: str, *groups: str, **facts: Any) -> UserFacts:
        """An account in ``groups``, with its id as its handle and name unless told."""
        facts.setdefault("email", f"{user_id}@memory.example")
        account = UserFacts(id=user_id, display_name=facts.pop("display_name", user_id.title()),
                            group_ids=frozenset(groups), **facts)
        self.accounts[user_id] = account
        self.handles[user_id] = user_id
        for group in groups:
            self.groups.setdefault(group, set())
        return account

    def change_account(self, user_id: str, **facts: Any) -> None:
        self.accounts[user_id] = replace(self.accounts[user_id], **facts)

    def add_page(self, page_id: str, path: str, title: str | None = None) -> dict[str, Any]:
        self.page_rows[page_id] = {"id": page_id, "site_id": SITE.id, "path": path,
                                   "title": title or path, "locale": "en", "tags": []}
        return self.page_rows[page_id]

    def watch(self, page_id: str, *user_ids: str) -> None:
        self.watches.setdefault(page_id, set()).update(user_ids)

    # -- the host interface --------------------------------------------------------------

    def page_watchers(self, page_id: str, *, after: str | None, limit: int) -> list[str]:
        return first_batch(self.watches.get(page_id, ()), after=after, limit=limit)

    def page_reviewers(self, page: PageSnapshot, *, after: str | None, limit: int) -> list[str]:
        path = page.get("path") or ""
        matching = [prefix for prefix in self.approval_rules if path.startswith(prefix)]
        if not matching:
            return []
        reviewer_groups = self.approval_rules[max(matching, key=len)]
        members = [a.id for a in self.accounts.values() if a.group_ids & reviewer_groups]
        return first_batch(members, after=after, limit=limit)

    def mentioned_users(self, text: str, *, site_id: str | None) -> list[str]:
        written = dict.fromkeys(h.lower() for h in HANDLE.findall(text))
        return [self.handles[h] for h in written if h in self.handles]

    def comment_author(self, comment_id: str) -> str | None:
        return self.comment_authors.get(comment_id)

    def accounts_with_permission(self, permission: str, *, after: str | None,
                                 limit: int) -> list[str]:
        granting = {g for g, held in self.groups.items() if permission in held}
        members = [a.id for a in self.accounts.values() if a.group_ids & granting]
        return first_batch(members, after=after, limit=limit)

    def announcement_audience(self, site_id: str | None, group_ids: frozenset[str] | None, *,
                              after: str | None, limit: int) -> list[str]:
        members = [a.id for a in self.accounts.values()
                   if group_ids is None or a.group_ids & group_ids]
        return first_batch(members, after=after, limit=limit)

    def announcement_groups(self) -> Sequence[tuple[str, str]]:
        return [(group, group.title()) for group in sorted(self.groups)]

    def users(self, user_ids: Sequence[str]) -> Mapping[str, UserFacts]:
        return {u: self.accounts[u] for u in user_ids if u in self.accounts}

    def check_access(self, group_ids: frozenset[str], permission: str,
                     page: PageSnapshot) -> bool:
        path = page.get("path") or ""
        return any(self._group_holds(g, permission, path) for g in group_ids)

    def _group_holds(self, group: str, permission: str, path: str) -> bool:
        rules = [r for r in self.rules
                 if r.group == group and path.startswith(r.prefix) and permission in r.permissions]
        if any(r.deny for r in rules):
            return False
        return bool(rules) or permission in self.groups.get(group, ())


    def pages(self, page_ids: Sequence[str]) -> Mapping[str, PageSnapshot]:
        return {p: dict(self.page_rows[p]) for p in page_ids if p in self.page_rows}

    def comments_exist(self, comment_ids: Sequence[str]) -> set[str]:
        return {c for c in comment_ids if c in self.comment_authors}

    def page_url(self, page: PageSnapshot, *, section: str | None = None) -> str:
        return f"/{page['path']}" + (f"/{section}" if section else "")

    def sites(self) -> Sequence[SiteFacts]:
        return [SITE]

    def is_admin(self, user_id: str) -> bool:
        return user_id in self.admins


def memory_app(host: MemoryHost, database_url: str, **config: Any) -> Flask:
    """A Flask app that is nothing but wikinotify on ``host``, its tables built."""
    app = Flask("memory_wiki")
    app.config.update(TESTING=True, SECRET_KEY="test-secret",
                      SQLALCHEMY_DATABASE_URI=database_url, **config)
    db = SQLAlchemy()
    db.init_app(app)
    WikiNotify(app, host=host)
    with app.app_context():
        WikiNotifyBase.metadata.create_all(db.engine)
    return app
