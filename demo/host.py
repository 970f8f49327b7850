"""The demo wiki as wikinotify sees it: the reference :class:`wikinotify.host.Host`.

Ids cross the interface as strings; each method turns them back into the integer keys of
the demo tables with :func:`_ints`. Candidate lookups are keyset-paginated on the integer
user id: ``WHERE user_id > after ORDER BY user_id LIMIT limit``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import sqlalchemy as sa
from flask import request
from sqlalchemy.dialects import postgresql

from wikinotify.host import Host, PageSnapshot, SiteFacts, UserFacts

from . import access, wiki
from .models import (
    MAX_ROW_ID,
    AuditLog,
    Comment,
    Group,
    Page,
    Site,
    User,
    Watch,
    db,
    user_groups,
)

#: What :meth:`DemoHost.page_url` appends for each section: the discussion tab is a page of
#: its own; suggestions are a form on the page.
_SECTION_SUFFIXES: dict[str | None, str] = {
    None: "",
    "comments": "/comments",
    "review": "#suggest",
}


#: How long, and for how many host names, :meth:`DemoHost.current_site_id` remembers.
SITE_CACHE_SECONDS = 10
SITE_CACHE_NAMES = 64


def _ints(ids: Iterable[Any]) -> list[int]:
    """The ids that are integers a demo table can hold; anything else names nothing."""
    ids = list(ids)
    try:
        # A fan-out batch is thousands of ids, nearly always all good: converted in C at
        # once, then looked at one by one only if one is not.
        numbers = list(map(int, ids))
    except (TypeError, ValueError):
        pass
    else:
        if not numbers or (max(numbers) <= MAX_ROW_ID and min(numbers) >= -MAX_ROW_ID):
            return numbers
    found = []
    for value in ids:
        try:
            number = int(value)
        except (TypeError, ValueError):
            continue
        if abs(number) <= MAX_ROW_ID:
            found.append(number)
    return found


def _int(value: Any) -> int | None:
    return next(iter(_ints([value])), None)


def _page_of_users(query: sa.Select, column: Any, after: str | None, limit: int) -> list[str]:
    """One keyset page of ``query``'s user ids, ascending."""
    if after is not None:
        query = query.where(column > int(after))
    rows = _core(query.order_by(column).limit(limit))
    return [str(user_id) for user_id, in rows]


def _core(query: sa.Select, parameters: Mapping[str, Any] | None = None) -> Any:
    """The rows of ``query`` as plain tuples, run on the session's connection (in its
    transaction) without the ORM's result processing: a fan-out batch reads thousands of
    ids and accounts, and loading them as ORM rows cost more than the query. Flushed
    first, as the session's own execute would: a request's pending changes are seen."""
    db.session.flush()
    return db.session.connection().execute(query, parameters).all()


def _among(column: Any, dialect: str) -> Any:
    """``column IN :ids`` for a fan-out batch of ids, bound as one text the database
    splits (:func:`_accounts`): an IN list would be thousands of bind parameters rendered
    and parsed on every call (more than an older SQLite allows), and psycopg dumps a bound
    array element by element in Python. A condition the WHERE ANDs, as wikinotify's
    ``dialects.among``: on SQLite the ids (each once) are joined, not first copied into a
    temporary index for IN."""
    ids = sa.bindparam("ids", type_=sa.Text)
    if dialect == "postgresql":
        array = sa.cast(sa.func.string_to_array(ids, ","), postgresql.ARRAY(sa.Integer))
        # IN (SELECT unnest(…)), not = ANY(…): PostgreSQL then looks each id up in the
        # index, at the same cost whatever the table's size; with ANY it scanned the table.
        return column.in_(sa.select(sa.func.unnest(array)))
    return column == sa.func.json_each(ids).table_valued("value").c.value


# The accounts' reads are made once per dialect and then only bound, as demo.wiki's
# statements: building one and its cache key cost more Python than a stream's check
# otherwise spends (docs/benchmarks.md#session-16-2026-12-05-the-checks-read).
@functools.cache
def _facts_statement(dialect: str) -> sa.Select:
    """Each account with its groups (as ``"1,4"``): plain columns, not ORM objects, since
    the fan-out asks for thousands at a time and building and tracking entities would cost
    more than the query."""
    return sa.select(
        User.id, User.display_name, User.username, User.email, User.locale, User.timezone,
        User.verified, User.active, User.is_system, wiki.member_of(User.id),
    ).where(_among(User.id, dialect))


@functools.cache
def _active_statement(dialect: str) -> sa.Select:
    """The active accounts' ids and nothing else (no groups)."""
    return sa.select(User.id).where(_among(User.id, dialect), User.active)


def _accounts(statement: Callable[[str], sa.Select], ids: list[int]) -> Any:
    """The rows of ``statement`` (of this session's dialect) for the accounts ``ids``."""
    dialect = db.session.get_bind().dialect.name
    bound = (",".join(map(str, ids)) if dialect == "postgresql"
             else json.dumps(list(dict.fromkeys(ids))))
    return _core(statement(dialect), {"ids": bound})


def _group_set(member_of: str | None, seen: dict[str | None, frozenset[str]]) -> frozenset[str]:
    """The group ids of ``"1,4"``, the same frozenset for the same text within a batch."""
    found = seen.get(member_of)
    if found is None:
        found = seen[member_of] = frozenset(member_of.split(",")) if member_of else frozenset()
    return found


def _facts_of(rows: Iterable[Sequence[Any]]) -> dict[str, UserFacts]:
    """:class:`UserFacts` of each account row (id, display name, username, email, locale,
    zone, verified, active, system, group ids as ``"1,4"``), by id."""
    # A wiki's readers share a handful of group sets: one frozenset each, so the
    # fan-out's access check per group set hashes each set once.
    group_sets: dict[str | None, frozenset[str]] = {}
    facts = {}
    for (user_id, display_name, username, email, locale, timezone, verified, active,
         is_system, member_of) in rows:
        # Positional, in UserFacts' order: thousands a batch, and keywords cost more.
        key = str(user_id)
        facts[key] = UserFacts(
            key, display_name or username, email,
            group_sets.get(member_of) or _group_set(member_of, group_sets),
            locale, timezone, verified, active, is_system,
        )
    return facts


def _json_elements(column: Any) -> Any:
    """The elements of a JSON array column as a one-column table (``value``), per dialect."""
    postgresql = db.session.get_bind().dialect.name == "postgresql"
    function = sa.func.json_array_elements_text if postgresql else sa.func.json_each
    return function(column).table_valued("value")


#: Made once and then only bound (see demo.wiki's statements).
_PAGES = sa.select(Page.id, Page.site_id, Page.path, Page.title, Page.locale).where(
    Page.id.in_(sa.bindparam("ids", expanding=True)))


def _site_facts(site: Site) -> SiteFacts:
    return SiteFacts(id=str(site.id), base_url=site.base_url, title=site.title,
                     primary_locale=site.primary_locale)


class DemoHost(Host):
    """Reads watchers, reviewers, mentions, accounts and sites from the demo tables."""

    def __init__(self) -> None:
        #: Host name -> (site id, until when it holds), see :meth:`current_site_id`.
        self._site_ids: dict[str | None, tuple[str | None, float]] = {}

    # -- candidates ---------------------------------------------------------------------

    def page_watchers(self, page_id: str, *, after: str | None, limit: int) -> list[str]:
        query = sa.select(Watch.user_id).where(Watch.page_id == _int(page_id))
        return _page_of_users(query, Watch.user_id, after, limit)

    def watchers_query(self, page_id: str) -> sa.Select:
        # As text: wikinotify stores every id it is given as a string.
        return sa.select(sa.cast(Watch.user_id, sa.String)).where(Watch.page_id == _int(page_id))

    def page_reviewers(self, page: PageSnapshot, *, after: str | None, limit: int) -> list[str]:
        reviewer_groups = wiki.reviewer_groups(_int(page.get("site_id")), page.get("path") or "")
        if reviewer_groups is None:
            return []
        # DISTINCT: someone in two reviewer groups is one candidate.
        query = (
            sa.select(user_groups.c.user_id)
            .where(user_groups.c.group_id.in_(reviewer_groups))
            .distinct()
        )
        return _page_of_users(query, user_groups.c.user_id, after, limit)

    def mentioned_users(self, text: str, *, site_id: str | None) -> list[str]:
        # Accounts are instance-wide here, so the site does not narrow the handles.
        handles = access.mentioned_handles(text)
        if not handles:
            return []
        handle = sa.func.lower(User.username)
        query = sa.select(User.id, handle).where(handle.in_(handles), User.active)
        ids = dict((found, str(user_id)) for user_id, found in db.session.execute(query))
        return [ids[h] for h in handles if h in ids]  # in the order written

    def comment_author(self, comment_id: str) -> str | None:
        # Joined to the accounts, so an author whose account is gone reads as None.
        query = (
            sa.select(User.id)
            .join(Comment, Comment.author_id == User.id)
            .where(Comment.id == _int(comment_id))
        )
        author_id = db.session.scalar(query)
        return str(author_id) if author_id is not None else None

    def accounts_with_permission(
        self, permission: str, *, after: str | None, limit: int
    ) -> list[str]:
        # Members of the groups whose own permissions list it (page rules grant page
        # permissions only), in one statement. DISTINCT: someone in two such groups is one
        # candidate. The keyset walks the membership's primary key (user_id, group_id);
        # the groups read for the IN are the wiki's handful.
        element = _json_elements(Group.permissions)
        holding = sa.select(Group.id).where(
            sa.exists().select_from(element).where(element.c.value == permission)
        )
        query = (
            sa.select(user_groups.c.user_id)
            .where(user_groups.c.group_id.in_(holding))
            .distinct()
        )
        return _page_of_users(query, user_groups.c.user_id, after, limit)

    def announcement_audience(
        self, site_id: str | None, group_ids: frozenset[str] | None, *,
        after: str | None, limit: int
    ) -> list[str]:
        # Accounts are instance-wide here: everyone is every account, a group its members
        # (DISTINCT: someone in two of them is one candidate). Who may read the site is
        # wikinotify's to ask (check_access), not this lookup's.
        if group_ids is None:
            return _page_of_users(sa.select(User.id), User.id, after, limit)
        query = (
            sa.select(user_groups.c.user_id)
            .where(user_groups.c.group_id.in_(_ints(group_ids)))
            .distinct()
        )
        return _page_of_users(query, user_groups.c.user_id, after, limit)

    def announcement_groups(self) -> Sequence[tuple[str, str]]:
        rows = db.session.execute(sa.select(Group.id, Group.name).order_by(Group.name))
        return [(str(group_id), name) for group_id, name in rows]

    # -- facts --------------------------------------------------------------------------

    def users(self, user_ids: Sequence[str]) -> Mapping[str, UserFacts]:
        ids = _ints(user_ids)
        return _facts_of(_accounts(_facts_statement, ids)) if ids else {}

    def active_users(self, user_ids: Sequence[str]) -> set[str]:
        # Asked for every open stream every 25 s: one column of the accounts' own rows.
        ids = _ints(user_ids)
        return {str(user_id) for user_id, in _accounts(_active_statement, ids)} if ids else set()

    def user(self, user_id: str) -> UserFacts | None:
        # The caller's facts, asked on every page wikinotify serves: her account and its
        # groups were read by this request's sign-in already (wiki.load_account).
        number = _int(user_id)
        loaded = wiki.loaded_account(number) if number is not None else None
        if loaded is None:
            return super().user(user_id)
        account, member_of = loaded
        return _facts_of([(
            account.id, account.display_name, account.username, account.email, account.locale,
            account.timezone, account.verified, account.active, account.is_system, member_of,
        )]).get(user_id)

    def check_access(self, group_ids: frozenset[str], permission: str, page: PageSnapshot) -> bool:
        return access.holds(wiki.grants(_ints(group_ids)), permission, page.get("path") or "")

    def held_permissions(
        self, group_ids: frozenset[str], permissions: Collection[str], pages: Sequence[PageSnapshot]
    ) -> dict[str, set[str]]:
        held = wiki.grants(_ints(group_ids))  # one query for the whole list
        return {
            page["id"]: {p for p in permissions if access.holds(held, p, page.get("path") or "")}
            for page in pages
        }

    def page_exists(self, page_id: str) -> bool:
        query = sa.select(sa.exists().where(Page.id == _int(page_id)))
        return bool(db.session.scalar(query))

    def pages(self, page_ids: Sequence[str]) -> Mapping[str, PageSnapshot]:
        ids = _ints(page_ids)
        if not ids:
            return {}
        rows = db.session.execute(_PAGES, {"ids": ids})
        return {
            str(row.id): {
                "id": str(row.id),
                "site_id": str(row.site_id),
                "path": row.path,
                "title": row.title,
                "locale": row.locale,
            }
            for row in rows
        }

    def comments_exist(self, comment_ids: Sequence[str]) -> set[str]:
        ids = _ints(comment_ids)
        if not ids:
            return set()
        query = sa.select(Comment.id).where(Comment.id.in_(ids))
        return {str(comment_id) for comment_id in db.session.scalars(query)}

    def page_url(self, page: PageSnapshot, *, section: str | None = None) -> str:
        # Built by hand rather than with url_for: workers render mails with no request,
        # and the routes are fixed (see demo.views). Quoted per segment, keeping the slashes.
        url = "/pages/" + quote(page["path"], safe="/")
        if section not in _SECTION_SUFFIXES:
            raise ValueError(f"unknown page section {section!r}")
        return url + _SECTION_SUFFIXES[section]

    def sites(self) -> Sequence[SiteFacts]:
        return [_site_facts(site) for site in db.session.scalars(sa.select(Site).order_by(Site.id))]

    def site(self, site_id: str | None) -> SiteFacts | None:
        # By its key, not from every site: a request found its own site already (its
        # locale, its views), and the session answers for that one without a statement.
        number = _int(site_id) if site_id is not None else None
        site = db.session.get(Site, number) if number is not None else None
        return _site_facts(site) if site is not None else None

    def current_site_id(self) -> str | None:
        # Every wikinotify request asks, the summary's 304 too, which is otherwise
        # answered without SQL; sites change rarely, so each host name's is remembered a
        # few seconds (in each process, for a bounded number of names: the Host header is
        # the client's to choose).
        hostname = urlsplit(f"//{request.host}").hostname
        now = time.monotonic()
        cached = self._site_ids.get(hostname)
        if cached is not None and now < cached[1]:
            return cached[0]
        site = wiki.current_site()
        site_id = str(site.id) if site is not None else None
        if len(self._site_ids) >= SITE_CACHE_NAMES:
            self._site_ids.clear()
        self._site_ids[hostname] = (site_id, now + SITE_CACHE_SECONDS)
        return site_id

    def last_site_id(self, user_ids: Sequence[str]) -> Mapping[str, str]:
        # Recorded by the login view; an account that has not signed in since is left out.
        ids = _ints(user_ids)
        if not ids:
            return {}
        query = sa.select(User.id, User.last_site_id).where(
            User.id.in_(ids), User.last_site_id.is_not(None)
        )
        return {str(user_id): str(site_id) for user_id, site_id in db.session.execute(query)}

    def is_admin(self, user_id: str) -> bool:
        query = sa.select(User.is_admin).where(User.id == _int(user_id))
        return bool(db.session.scalar(query))

    def audit(
        self, action: str, *, actor_id: str | None, kind: str, details: Mapping[str, Any]
    ) -> None:
        # Added to the caller's session, so the entry commits (or rolls back) with the
        # change it records.
        db.session.add(AuditLog(action=action, kind=kind, actor_id=actor_id, details=dict(details)))
