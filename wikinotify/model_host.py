"""A ready :class:`~wikinotify.host.Host` for a one-site wiki whose accounts, pages and
watches are SQLAlchemy models: the wiki names its models and, where they differ from the
usual names, its columns, and writes no method (docs/adopting.md#the-model-host)::

    host = ModelHost(user=User, page=Page, watch=Watch, page_url="/pages/{path}",
                     page_path=Page.slug, admin=User.is_admin)

Every lookup is one query on the wiki's own ``db.session``: watchers keyset-paginated on
the watch table's user column, accounts and pages in one ``IN`` each. Ids cross the host
interface as strings; each is turned back into the key's own type (an integer, a string,
a UUID) before it reaches SQL, and one that type cannot hold names nothing, so a stray id
never costs a failed statement (which aborts a PostgreSQL transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.base import ColumnCollection

from .config import ConfigError
from .host import ONE_SITE_ID, Host, PageSnapshot, UserFacts
from .model_keys import Key
from .state import state

#: A column of one of the wiki's models: the attribute (``User.username``) or its name.
Column = QueryableAttribute[Any] | str
#: A fact about an account: a column, its name, or any SQL expression on the user's table
#: (``User.deleted_at.is_(None)`` for an ``active`` flag).
Fact = Column | sa.ColumnElement[Any]
#: ``check_access(group_ids, permission, page)``, as :meth:`Host.check_access` says.
AccessCheck = Callable[[frozenset[str], str, PageSnapshot], bool]
#: A site-relative URL template with ``{path}`` and ``{id}``, or ``(page, section) -> URL``.
PageUrl = str | Callable[[PageSnapshot, str | None], str]

#: The one group every account is in when the wiki has no groups (``groups=None``).
ACCOUNTS_GROUP = "accounts"
#: Between the group ids of one account in :meth:`ModelHost.users`' one query: a control
#: character, which no group id holds.
_GROUP_SEPARATOR = "\x1f"


def accounts_read_everything(group_ids: frozenset[str], permission: str,
                             page: PageSnapshot) -> bool:
    """The access of a wiki without groups and without public pages: every account holds
    every permission on every page, and a guest none (so a site-wide webhook, which hears
    only what a guest may read, hears of no page). :class:`ModelHost`'s default."""
    return ACCOUNTS_GROUP in group_ids


def everyone_reads_everything(group_ids: frozenset[str], permission: str,
                              page: PageSnapshot) -> bool:
    """The access of a wiki without groups whose pages guests read too: everyone holds
    every permission on every page, so site-wide webhooks hear of every page."""
    return True


@dataclass(frozen=True)
class _Users:
    key: Key
    facts: dict[str, sa.ColumnElement[Any]]


class ModelHost(Host):
    """A :class:`~wikinotify.host.Host` read from the wiki's SQLAlchemy models.

    :param user: the accounts' model. Columns (attributes or names): ``user_id``
        (default ``id``), ``user_name`` (``display_name``, ``name`` or ``username``,
        the first it has), ``user_email`` (``email``); optional ``user_verified``,
        ``user_active``, ``user_locale``, ``user_timezone``, each a column or any SQL
        expression on the table (``user_active=User.deleted_at.is_(None)``). Without
        ``user_active``, an ``active`` or ``is_active`` column says who is active; without
        the others every account is verified (mail goes to its address), in the site's
        language and zone.
    :param page: the pages' model: ``page_id`` (``id``), ``page_title`` (``title``),
        ``page_path`` (``path`` or ``slug``), optional ``page_locale``.
    :param watch: who watches which page: ``watch_user`` (``user_id``) and
        ``watch_page`` (``page_id``) on a model or a ``Table``.
    :param page_url: the site-relative URL of a page, a template with ``{path}`` (and
        ``{id}``), each URL-quoted; or a function ``(page, section) -> URL`` for a wiki
        whose discussion or suggestions have URLs of their own (:meth:`Host.page_url`).
    :param admin: who may open Admin → Notifications: a boolean column or expression
        on the accounts (``User.is_admin``), or a function of a user id string. None: nobody.
    :param groups: a wiki with groups: the membership table's ``(user column, group
        column)``; each account's ``group_ids`` are read with its facts, in the same
        query, and ``check_access`` must then be given. None: one group for every
        account (:data:`ACCOUNTS_GROUP`).
    :param check_access: :meth:`Host.check_access`, a pure function of a group set, a
        permission and a page snapshot. Default without groups:
        :func:`accounts_read_everything`; :func:`everyone_reads_everything` for a wiki
        whose guests read every page too.

    It is a one-site wiki: :meth:`sites` is the default, from ``WIKINOTIFY_SITE_URL``,
    and every page's ``site_id`` is ``"main"``. Subclass it and override a method for a
    feature it does not read (approval rules, mentions, comments). A wiki with several
    sites overrides :meth:`sites` (and ``current_site_id``, ``last_site_id``) and also
    :meth:`pages` and :meth:`snapshot`, which would otherwise put every page on ``"main"``.
    """

    def __init__(
        self,
        *,
        user: type[Any],
        page: type[Any],
        watch: Any,
        page_url: PageUrl,
        user_id: Column | None = None,
        user_name: Column | None = None,
        user_email: Column | None = None,
        user_verified: Fact | None = None,
        user_active: Fact | None = None,
        user_locale: Fact | None = None,
        user_timezone: Fact | None = None,
        page_id: Column | None = None,
        page_title: Column | None = None,
        page_path: Column | None = None,
        page_locale: Column | None = None,
        watch_user: Column | None = None,
        watch_page: Column | None = None,
        admin: Fact | Callable[[str], bool] | None = None,
        groups: tuple[Fact, Fact] | None = None,
        check_access: AccessCheck | None = None,
    ) -> None:
        if groups is not None and check_access is None:
            raise ConfigError("ModelHost: a wiki with groups says who may read what: give "
                              "check_access=(group_ids, permission, page) -> bool.")
        _check_template(page_url)
        user_key = _column(user, user_id, "user_id", "id")
        facts = {
            "name": _column(user, user_name, "user_name", "display_name", "name", "username"),
            "email": _column(user, user_email, "user_email", "email"),
        }
        active = _switch(user) if user_active is None else user_active
        optional = {"verified": user_verified, "active": active,
                    "locale": user_locale, "timezone": user_timezone}
        facts.update({name: _fact(user, given, f"user_{name}")
                      for name, given in optional.items() if given is not None})
        #: The membership table's (user column, group column), for announcements.
        self._membership: tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]] | None = None
        if groups is not None:
            self._membership = (_fact(user, groups[0], "groups"), _fact(user, groups[1], "groups"))
            facts["groups"] = _groups_of(*self._membership, user_key)
        self._users = _Users(Key(user_key), facts)
        self._page_key = Key(_column(page, page_id, "page_id", "id"))
        self._page_columns: dict[str, Any] = {
            "id": _attribute(page, page_id, "page_id", "id"),
            "title": _attribute(page, page_title, "page_title", "title"),
            "path": _attribute(page, page_path, "page_path", "path", "slug"),
        }
        if page_locale is not None:
            self._page_columns["locale"] = _attribute(page, page_locale, "page_locale")
        # The watch table's own columns, read in their own types (a text user column
        # beside an integer account key pages as text).
        self._watch_user = Key(_column(watch, watch_user, "watch_user", "user_id"))
        self._watch_page = Key(_column(watch, watch_page, "watch_page", "page_id"))
        self._page_url = page_url
        self._admin_function: Callable[[str], bool] | None = None
        self._admin_column: sa.ColumnElement[Any] | None = None
        if isinstance(admin, str | sa.ColumnElement | QueryableAttribute):
            self._admin_column = _fact(user, admin, "admin")
        elif admin is not None:
            self._admin_function = admin
        self._check_access = check_access or accounts_read_everything

    # -- candidates ---------------------------------------------------------------------

    def page_watchers(self, page_id: str, *, after: str | None, limit: int) -> list[str]:
        dialect, user = _dialect(), self._watch_user.column
        query = sa.select(user).where(self._watches(page_id, dialect))
        if after is not None:
            query = query.where(user > self._cursor(after, dialect))
        rows = _session().scalars(query.order_by(user).limit(limit))
        return [str(user_id) for user_id in rows]

    def watchers_query(self, page_id: str) -> sa.Select[Any] | None:
        dialect = _dialect()
        if not self._watch_user.sql_text_is_str(dialect):
            return None  # emit reads them with page_watchers instead
        return sa.select(sa.cast(self._watch_user.column, sa.Text)).where(
            self._watches(page_id, dialect))

    def _watches(self, page_id: str, dialect: str) -> sa.ColumnElement[bool]:
        """The watch rows of ``page_id`` that name an account (a NULL user is no one)."""
        page = self._watch_page.value(page_id, dialect)
        if page is None:
            return sa.false()
        return sa.and_(self._watch_page.column == page, self._watch_user.column.is_not(None))

    def announcement_audience(
        self, site_id: str | None, group_ids: frozenset[str] | None, *,
        after: str | None, limit: int
    ) -> list[str]:
        """Everyone: every account, keyset on its key. Groups: their members, from the
        membership table (``groups=``); without one, every account is in
        :data:`ACCOUNTS_GROUP` and in no other."""
        key, dialect = self._users.key, _dialect()
        column: sa.ColumnElement[Any] = key.column
        query: sa.Select[Any] = sa.select(column)
        if group_ids is not None and self._membership is None:
            if ACCOUNTS_GROUP not in group_ids:
                return []
        elif group_ids is not None:
            assert self._membership is not None
            column, group = self._membership
            # As text: group ids cross the interface as strings, whatever the column is.
            query = sa.select(column).where(sa.cast(group, sa.String).in_(sorted(group_ids)),
                                            column.is_not(None)).distinct()
        if after is not None:
            cursor = key.value(after, dialect)
            if cursor is None:  # a cursor is an id this host gave out: never
                raise ValueError(f"{after!r} is not an account id of this wiki")
            query = query.where(column > cursor)
        return [str(user_id) for user_id in _session().scalars(query.order_by(column).limit(limit))]

    def announcement_groups(self) -> Sequence[tuple[str, str]]:
        """The groups named in the membership table, each by its id (the table has no
        names); without one, the one group of every account."""
        if self._membership is None:
            return [(ACCOUNTS_GROUP, ACCOUNTS_GROUP)]
        group = sa.cast(self._membership[1], sa.String)
        found = _session().scalars(sa.select(group).where(group.is_not(None)).distinct()
                                   .order_by(group))
        return [(group_id, group_id) for group_id in found]

    # -- facts --------------------------------------------------------------------------

    def users(self, user_ids: Sequence[str]) -> Mapping[str, UserFacts]:
        key, session = self._users.key, _session()
        keys = key.values(user_ids, _dialect())
        if not keys:
            return {}
        labelled = [key.column.label("id"),
                    *(c.label(n) for n, c in self._users.facts.items())]
        rows = session.execute(sa.select(*labelled).where(key.among(session, keys)))
        group_sets: dict[str | None, frozenset[str]] = {}
        return {str(row.id): self._facts(row._mapping, group_sets) for row in rows}

    def active_users(self, user_ids: Sequence[str]) -> set[str]:
        # The key and the active fact alone, not the groups: every open stream asks.
        key, session = self._users.key, _session()
        keys = key.values(user_ids, _dialect())
        if not keys:
            return set()
        active = self._users.facts.get("active", sa.true())
        rows = session.execute(sa.select(key.column, active).where(key.among(session, keys)))
        return {str(user_id) for user_id, on in rows if on}  # as _facts: bool(active)

    def _facts(self, row: Mapping[str, Any],
               group_sets: dict[str | None, frozenset[str]]) -> UserFacts:
        if "groups" in self._users.facts:
            joined = row["groups"]
            if joined not in group_sets:  # a wiki's readers share a handful of group sets
                group_sets[joined] = frozenset(joined.split(_GROUP_SEPARATOR) if joined else ())
            group_ids = group_sets[joined]
        else:
            group_ids = frozenset({ACCOUNTS_GROUP})
        return UserFacts(
            id=str(row["id"]), display_name=str(row["name"] or row["id"]),
            email=row["email"], group_ids=group_ids, locale=row.get("locale"),
            timezone=row.get("timezone"), verified=bool(row.get("verified", True)),
            active=bool(row.get("active", True)),
        )

    def check_access(self, group_ids: frozenset[str], permission: str,
                     page: PageSnapshot) -> bool:
        return self._check_access(group_ids, permission, page)

    def pages(self, page_ids: Sequence[str]) -> Mapping[str, PageSnapshot]:
        session = _session()
        keys = self._page_key.values(page_ids, _dialect())
        if not keys:
            return {}
        labelled = [column.label(name) for name, column in self._page_columns.items()]
        query = sa.select(*labelled).where(self._page_key.among(session, keys))
        rows = session.execute(query)
        return {str(row.id): _snapshot(row._mapping) for row in rows}

    def page_exists(self, page_id: str) -> bool:
        page = self._page_key.value(page_id, _dialect())
        if page is None:
            return False
        return bool(_session().scalar(sa.select(sa.exists().where(
            self._page_key.column == page))))

    def snapshot(self, page: Any) -> dict[str, Any]:
        """What ``emit`` stores of ``page``, one of the wiki's page objects: the snapshot
        :meth:`pages` would read, taken without a query
        (``notify.emit(..., snapshot=host.snapshot(page))``)."""
        return _snapshot({name: getattr(page, column.key)
                          for name, column in self._page_columns.items()})

    def page_url(self, page: PageSnapshot, *, section: str | None = None) -> str:
        if callable(self._page_url):
            return self._page_url(page, section)
        # A wiki without a discussion or suggestions page of its own: they are the page.
        return self._page_url.format(path=quote(str(page.get("path") or ""), safe="/"),
                                     id=quote(str(page["id"]), safe=""))

    def is_admin(self, user_id: str) -> bool:
        if self._admin_function is not None:
            return bool(self._admin_function(user_id))
        key = self._users.key
        account = key.value(user_id, _dialect())
        if self._admin_column is None or account is None:
            return False
        query = sa.select(self._admin_column).where(key.column == account)
        return bool(_session().scalar(query))

    def _cursor(self, text: str, dialect: str) -> Any:
        value = self._watch_user.value(text, dialect)
        if value is None:  # a cursor is a watch row's user this host gave out: never
            raise ValueError(f"{text!r} is not a watcher id of this wiki")
        return value


def _session() -> Any:
    """The wiki's session, the one Flask-SQLAlchemy hands out in this app context."""
    return state().db.session


def _check_template(page_url: PageUrl) -> None:
    """Refuse at start-up a ``page_url`` template that names more than ``{path}`` and
    ``{id}``, rather than fail at the first link."""
    if callable(page_url):
        return
    try:
        page_url.format(path="p", id="1")
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(f"ModelHost: page_url {page_url!r} may name {{path}} and {{id}} "
                          f"only ({error!r}); give a function (page, section) -> URL for "
                          "more.") from None


def _dialect() -> str:
    return str(_session().get_bind().dialect.name)


def _snapshot(row: Mapping[str, Any]) -> dict[str, Any]:
    snapshot = {name: (str(value) if name == "id" else value) for name, value in row.items()}
    snapshot["site_id"] = ONE_SITE_ID
    return snapshot


def _named(model: Any, option: str, names: Sequence[str]) -> Any:
    if isinstance(model, sa.Table):
        model = model.c
    for name in names:
        found = getattr(model, name, None)
        if found is not None and hasattr(found, "__clause_element__"):
            return found
    raise ConfigError(f"ModelHost: {_owner(model)} has no column {' or '.join(map(repr, names))}; "
                      f"name the one to read with {option}=")


def _owner(model: Any) -> str:
    """A model's class name, a table's name (from its ``.c`` too), for an error."""
    if isinstance(model, ColumnCollection):
        model = next((column.table for column in model), model)
    return str(getattr(model, "__name__", None) or getattr(model, "name", None) or model)


def _attribute(model: Any, given: Column | None, option: str, *names: str) -> Any:
    """The model's column ``given`` (an attribute or its name), else the first of
    ``names`` it has."""
    if isinstance(given, str):
        return _named(model, option, [given])
    return given if given is not None else _named(model, option, names)


def _column(model: Any, given: Column | None, option: str,
            *names: str) -> sa.ColumnElement[Any]:
    found = _attribute(model, given, option, *names)
    return found if isinstance(found, sa.ColumnElement) else found.expression


def _switch(model: Any) -> str | None:
    """The name of the accounts' own ``active`` or ``is_active`` column, if it has one: a
    wiki that switches an account off means it to be told nothing (Flask-Login's
    ``UserMixin.is_active``, a property always true, is no column and is not read)."""
    mapper = sa.inspect(model, raiseerr=False)
    columns = getattr(mapper, "columns", {})
    return next((name for name in ("active", "is_active") if name in columns), None)


def _fact(model: Any, given: Fact, option: str) -> sa.ColumnElement[Any]:
    """A fact's column or expression; a name is looked up on the model."""
    if isinstance(given, sa.ColumnElement):
        return given
    return _column(model, given, option)



def _groups_of(member: sa.ColumnElement[Any], group: sa.ColumnElement[Any],
               account: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """An account's group ids in one string, a subquery of its row: read with its facts,
    the membership table looked up by its user column."""
    joined = sa.func.aggregate_strings(sa.cast(group, sa.String), _GROUP_SEPARATOR)
    return sa.select(joined).where(member == account).scalar_subquery()
