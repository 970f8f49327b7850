"""The host interface: everything wikinotify needs to know about the wiki.

A wiki adopts wikinotify by subclassing :class:`Host` and passing an instance to
``WikiNotify(app, host=...)``. wikinotify never imports the wiki: watchers, groups, page
rules, approval rules, mentions, users and sites are all read through this class.

Ids crossing this interface are **strings** (wikinotify stores them as text, so a wiki
with integer, UUID or slug keys all fit). Convert with ``str()`` on the way out and back
to your own type on the way in.

Candidate lookups are **keyset-paginated**: each returns at most ``limit`` ids that sort
after ``after`` (``None`` for the first batch), in ascending order of your own key. The
fan-out passes back the last id it received, so a lookup is always an indexed range scan
and never an OFFSET; a wiki with a million watchers on a page costs a thousand cheap
queries, not one huge one.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urldefrag, urlsplit

import sqlalchemy as sa
from flask import Flask, current_app

from .config import ConfigError

audit_log = logging.getLogger("wikinotify.audit")
#: A page as a category and an access check see it: ``id``, ``site_id``, ``path``,
#: ``locale``, ``title``, ``tags`` (list of str), ``publish_state`` and whatever else the
#: wiki's page rules look at. For a deleted page this is the snapshot taken at deletion.
PageSnapshot = Mapping[str, Any]
#: The permission that reads a page, the one an announcement's readers hold on the site.
READ_PAGES = "read:pages"


# Slots, and not frozen: a fan-out makes one per candidate, and a frozen dataclass's
# __init__ (a guarded setattr per field) cost 4.8 µs where this one costs 1.3, half a
# second of every 100,000 readers. Hashable by value as before; nothing changes one.
@dataclass(slots=True, unsafe_hash=True)
class UserFacts:
    """What wikinotify needs to know about one account, read in batches. A value: make a
    new one (``dataclasses.replace``) rather than change one."""

    id: str
    display_name: str
    email: str | None = None
    group_ids: frozenset[str] = field(default_factory=frozenset)
    locale: str | None = None
    timezone: str | None = None
    verified: bool = True
    active: bool = True
    #: Service accounts that act but are never told anything.
    system: bool = False
    #: The anonymous account some wikis keep for guests' actions.
    guest: bool = False

    @property
    def can_receive(self) -> bool:
        """Whether this account may get notifications at all (docs/rules.md#corner-cases)."""
        return self.active and not self.system and not self.guest

    @property
    def can_receive_email(self) -> bool:
        """Unverified addresses get in-app entries but never mail (docs/rules.md#corner-cases)."""
        return self.can_receive and self.verified and bool(self.email)


@dataclass(frozen=True)
class SiteFacts:
    """One site of the wiki, as a mail or a link needs it."""

    id: str
    base_url: str
    title: str
    primary_locale: str = "en"
    #: IANA name of the site's zone: a digest's hour for readers who set none
    #: (docs/rules.md#digests).
    timezone: str | None = None

    @property
    def is_https(self) -> bool:
        return self.base_url.startswith("https://")


class Host(abc.ABC):
    """The wiki, as wikinotify sees it. Subclass it and implement the abstract methods.

    Six are abstract (:meth:`page_watchers`, :meth:`users`, :meth:`check_access`,
    :meth:`pages`, :meth:`page_url`, :meth:`is_admin`): that is the smallest working host.
    The others have a default that fits a wiki without the feature they serve (several
    sites, approval rules, mentions, threaded comments, an audit log), said on each;
    override one when your wiki has the feature. For a wiki whose accounts, pages and
    watches are SQLAlchemy models, :class:`wikinotify.ModelHost` implements them all from
    the models' names.

    Methods are called from web requests and from RQ workers alike, always inside an
    application context, so they may use the wiki's own ``db.session``.
    """

    # -- candidates (keyset-paginated) ---------------------------------------------------

    @abc.abstractmethod
    def page_watchers(self, page_id: str, *, after: str | None, limit: int) -> list[str]:
        """Ids of the accounts watching ``page_id``."""

    def watchers_query(self, page_id: str) -> sa.Select[Any] | None:
        """A one-column SELECT of the watchers' ids (as text) of ``page_id``.

        ``emit("page:delete", ...)`` embeds it in the INSERT of the event, so the watchers
        are captured in the same statement, before the page and its watch rows go
        (docs/rules.md#deleting-a-page).

        Default: ``None``, and ``emit`` reads the watchers with :meth:`page_watchers` before
        its INSERT instead (one more query per thousand watchers, on deletions only).
        Override it where a page can have many watchers.
        """
        return None

    def page_reviewers(
        self, page: PageSnapshot, *, after: str | None, limit: int
    ) -> list[str]:
        """Members of the reviewer groups of every enabled approval rule matching ``page``.

        Only group membership counts (docs/rules.md#reviewers): holding a review permission, or
        being an administrator, does not make anyone a reviewer.

        Default: nobody, for a wiki without approval rules.
        """
        return []

    def mentioned_users(self, text: str, *, site_id: str | None) -> list[str]:
        """Ids of the accounts whose ``@handle`` is written in ``text``, in the order the
        handles are first written (when a comment names more than
        ``WIKINOTIFY_MENTION_LIMIT``, the first ones are told).

        Default: nobody, for a wiki without @mentions.
        """
        return []

    def comment_author(self, comment_id: str) -> str | None:
        """The account that wrote ``comment_id``, or ``None`` for a guest or a gone comment.

        Default: ``None``, for a wiki without threaded replies (nobody is told of a reply).
        """
        return None

    def accounts_with_permission(
        self, permission: str, *, after: str | None, limit: int
    ) -> list[str]:
        """Ids of the accounts holding ``permission`` wiki-wide (``manage:system``), for a
        category about the wiki rather than a page (a failed storage sync,
        docs/adopting.md#adding-a-kind-of-notification).

        Default: raises :class:`NotImplementedError`, since no launch category asks; a
        host whose own category tells permission holders implements it. An empty answer
        instead would leave that category silently deaf: this way the event fails, and
        Admin → Notifications shows which category needed the method.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement Host.accounts_with_permission, "
            f"which telling the holders of {permission!r} needs (see wikinotify.host)"
        )

    def announcement_audience(
        self, site_id: str | None, group_ids: frozenset[str] | None, *,
        after: str | None, limit: int
    ) -> list[str]:
        """Ids of the accounts an announcement on ``site_id`` is for: everyone
        (``group_ids`` ``None``), or the members of any of ``group_ids`` (each account
        once). Not yet sorted by who may read the site: the fan-out asks
        :meth:`check_access` for ``read:pages`` on the site's home, a page snapshot with
        no id and no path (``{"id": None, "site_id": site_id}``), once per group set
        (docs/rules.md#announcements).

        Default for everyone: the accounts holding ``read:pages`` wiki-wide, through
        :meth:`accounts_with_permission` (so a host must implement that one). Default
        for groups: raises :class:`NotImplementedError`, since nothing else in this class
        lists a group's members; a host that offers groups (:meth:`announcement_groups`)
        implements it.
        """
        if group_ids is None:
            return self.accounts_with_permission(READ_PAGES, after=after, limit=limit)
        raise NotImplementedError(
            f"{type(self).__name__} does not implement Host.announcement_audience for "
            "groups, which an announcement to a group needs (see wikinotify.host)"
        )

    def announcement_groups(self) -> Sequence[tuple[str, str]]:
        """The groups an announcement may be addressed to, as ``(id, name)`` pairs in the
        order the administrator picks from (docs/rules.md#announcements).

        Default: none, and announcements go to everyone only.
        """
        return []

    # -- facts ---------------------------------------------------------------------------

    @abc.abstractmethod
    def users(self, user_ids: Sequence[str]) -> Mapping[str, UserFacts]:
        """Facts about every id given that names an account, in one query.

        Ids that name no account are left out of the answer.
        """

    def active_users(self, user_ids: Sequence[str]) -> set[str]:
        """Which of ``user_ids`` name an account that is active (:attr:`UserFacts.active`),
        in one query. An open stream ends when its account no longer is one, and every
        open stream asks every 25 s (docs/journey.md#the-live-badge): thousands of ids a
        second in a busy web process, which need no other fact.

        Default: the accounts :meth:`users` finds active; override it where that reads
        more than whether an account is active (its groups, say).
        """
        return {user_id for user_id, facts in self.users(user_ids).items() if facts.active}

    @abc.abstractmethod
    def check_access(
        self, group_ids: frozenset[str], permission: str, page: PageSnapshot
    ) -> bool:
        """Whether members of exactly ``group_ids`` hold ``permission`` on ``page``.

        Must be pure: the answer may depend only on the arguments and the wiki's group and
        rule definitions, never on who is asking. wikinotify memoizes it per group set, so
        ten thousand recipients in six group combinations cost six calls (docs/rules.md#access).
        """

    def held_permissions(
        self, group_ids: frozenset[str], permissions: Collection[str], pages: Sequence[PageSnapshot]
    ) -> dict[str, set[str]]:
        """For each of ``pages`` (by ``id``), which of ``permissions`` members of exactly
        ``group_ids`` hold on it: :meth:`check_access` for a whole list at once, asked
        each time an inbox page or a mail is shown to one reader.

        This default asks :meth:`check_access` page by page; override it where one query
        can answer for every page (the demo loads the groups' rules once).
        """
        return {
            page["id"]: {p for p in permissions if self.check_access(group_ids, p, page)}
            for page in pages
        }

    def page_exists(self, page_id: str) -> bool:
        """Whether the page row is still there (a ``deleted`` variant needs it gone).

        Default: asks :meth:`pages`; override if you have a cheaper lookup.
        """
        return page_id in self.pages([page_id])

    @abc.abstractmethod
    def pages(self, page_ids: Sequence[str]) -> Mapping[str, PageSnapshot]:
        """The current state (``id``, ``site_id``, ``path``, ``title``, ``locale``) of every
        page in ``page_ids`` that still exists, in one query. Links follow a move this way."""

    def comments_exist(self, comment_ids: Sequence[str]) -> set[str]:
        """Which of ``comment_ids`` still exist: an excerpt is shown only while its comment
        does, so deleting spam removes its text from every inbox it reached.

        Default: none, so no comment excerpt is ever shown (never one of a deleted
        comment); a wiki with comments overrides it to show them.
        """
        return set()

    @abc.abstractmethod
    def page_url(self, page: PageSnapshot, *, section: str | None = None) -> str:
        """The site-relative URL of ``page`` (by its ``path``): ``section``, the entry's link
        target, is ``None`` for the page, ``"comments"`` for its discussion, ``"review"``
        for its suggestions.
        One comment and one suggestion are :meth:`comment_url` and :meth:`suggestion_url`."""

    def comment_url(self, page: PageSnapshot, comment_id: str) -> str:
        """The site-relative URL of one comment on ``page``: where an entry about a
        comment (on a page you watch, a reply, a mention) leads.

        Default: the discussion (:meth:`page_url` with ``section="comments"``) at the
        fragment ``#comment-<id>``, for a wiki that gives each comment that HTML ``id``;
        one that does not still lands on the discussion.
        """
        return with_fragment(self.page_url(page, section="comments"), f"comment-{comment_id}")

    def suggestion_url(self, page: PageSnapshot, submission_id: str) -> str:
        """The site-relative URL of one suggestion to ``page``: where a review request
        (and a rejected suggestion's answer) leads.

        Default: the page's suggestions (:meth:`page_url` with ``section="review"``) at
        the fragment ``#suggestion-<id>``, for a wiki that gives each suggestion that HTML
        ``id``; one that does not still lands on the suggestions.
        """
        return with_fragment(
            self.page_url(page, section="review"), f"suggestion-{submission_id}"
        )

    def sites(self) -> Sequence[SiteFacts]:
        """Every site of the wiki. A wiki with one site answers a list of one.

        Default: the one site of a one-site wiki, :func:`one_site`: id ``"main"``
        (:data:`ONE_SITE_ID`), at ``WIKINOTIFY_SITE_URL``, named ``WIKINOTIFY_SITE_TITLE``.
        Start-up refuses a host that keeps this default while ``WIKINOTIFY_SITE_URL`` is
        unset (:func:`check_one_site`). A wiki with several sites overrides it.
        """
        return [one_site()]

    def current_site_id(self) -> str | None:
        """The site the current request is for (called only inside a request).

        Default: the one site of a wiki with one site; a wiki with several must say.
        """
        sites = self.sites()
        if len(sites) != 1:
            raise NotImplementedError(
                f"{type(self).__name__} has {len(sites)} sites: implement "
                "Host.current_site_id to say which one a request is for"
            )
        return sites[0].id

    def last_site_id(self, user_ids: Sequence[str]) -> Mapping[str, str]:
        """For each of ``user_ids`` the wiki knows it for, the id of the site that account
        last signed in on, in one query. Accounts belong to no site, so mail of an
        instance-scoped category (``scope="instance"``) goes out with that site: its
        links, its name and its language (docs/rules.md#the-mail-run,
        docs/rules.md#the-site-switch). The drain asks once per run.

        Default: nobody's (``{}``), and such mail goes out with the first of :meth:`sites`,
        for a wiki with one site or one that does not record sign-ins.
        """
        return {}

    def avatar_urls(self, user_ids: Sequence[str]) -> Mapping[str, str]:
        """For each of ``user_ids`` that has a picture, its absolute ``http(s)`` URL, in one
        query: the bell menu shows it beside the actor's name (docs/rules.md#the-inbox-api).
        A URL of any other scheme is not shown.

        Default: nobody's (``{}``), and the bell menu shows the actor's initials.
        """
        return {}

    @abc.abstractmethod
    def is_admin(self, user_id: str) -> bool:
        """Whether the account may open Admin → Notifications."""

    def audit(
        self, action: str, *, actor_id: str | None, kind: str, details: Mapping[str, Any]
    ) -> None:
        """Record ``action`` (e.g. ``updateNotificationPrefs``) in the wiki's audit log.

        Called before wikinotify commits the change it records: add the entry to the same
        session so both commit, or roll back, together.

        Default: a line on the ``wikinotify.audit`` logger, for a wiki without an audit
        log. ``details`` never holds a secret (the API never returns one).
        """
        audit_log.info(
            "%s by %s (%s): %s", action, actor_id or "the system", kind, dict(details)
        )

    # -- conveniences built on the above ---------------------------------------------------

    def site(self, site_id: str | None) -> SiteFacts | None:
        """The site with ``site_id``, or ``None``. Override if you have a cheaper lookup."""
        return next((s for s in self.sites() if s.id == site_id), None)

    def user(self, user_id: str) -> UserFacts | None:
        return self.users([user_id]).get(user_id)

    def user_locale(self, user_id: str) -> str | None:
        facts = self.user(user_id)
        return facts.locale if facts else None


#: The site id of a one-site wiki: what :meth:`Host.sites` answers by default, and what
#: ``emit`` stores when it is given no ``site_id``.
ONE_SITE_ID = "main"


def one_site(app: Flask | None = None) -> SiteFacts:
    """The one site of a one-site wiki, from the settings ``WIKINOTIFY_SITE_URL`` and
    ``WIKINOTIFY_SITE_TITLE`` (None: the URL's host name). A setting, not the request:
    workers have none, and they make the links in mail."""
    app = app or current_app
    base_url = app.config.get("WIKINOTIFY_SITE_URL")
    if not base_url:
        raise ConfigError(ONE_SITE_NEEDS_URL)
    title = app.config.get("WIKINOTIFY_SITE_TITLE") or urlsplit(base_url).hostname or base_url
    return SiteFacts(id=ONE_SITE_ID, base_url=base_url, title=title)


ONE_SITE_NEEDS_URL = (
    "WIKINOTIFY_SITE_URL is not set, and the host keeps Host.sites' default (one site): "
    "set it to the wiki's address, e.g. WIKINOTIFY_SITE_URL = 'https://wiki.example.org' "
    "(FLASK_WIKINOTIFY_SITE_URL in the environment), or implement Host.sites."
)


def keeps_one_site(host: Host) -> bool:
    """Whether ``host`` keeps :meth:`Host.sites`' default: a one-site wiki whose site
    comes from the settings."""
    return type(host).sites is Host.sites


def check_one_site(app: Flask, host: Host) -> None:
    """At start-up: refuse a one-site host (:func:`keeps_one_site`) without
    ``WIKINOTIFY_SITE_URL``, naming the setting, rather than fail at its first mail."""
    if keeps_one_site(host):
        one_site(app)


def with_fragment(url: str, fragment: str) -> str:
    """``url`` at ``#fragment``, in place of any fragment it had (``#suggest``)."""
    return urldefrag(url).url + "#" + quote(fragment)


def first_batch(ids: Iterable[str], *, after: str | None, limit: int) -> list[str]:
    """Keyset-paginate an in-memory list of ids the way a lookup would (sorted, > after).

    For candidate sources that already hold their ids, such as the watchers captured on a
    deletion event. The order is text order: the cursor only ever goes back to the list it
    came from, so it need not match the wiki's own key order.
    """
    ordered = sorted(set(ids))
    if after is not None:
        ordered = [i for i in ordered if i > after]
    return ordered[:limit]
