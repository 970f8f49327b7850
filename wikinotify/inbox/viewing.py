"""Mark-read-on-view (docs/rules.md#mail-cadence): a page view clears the entries the reader has now
seen.

The wiki calls ``notify.mark_seen(user_id, page_id, section=...)`` where it shows a page
or its discussion: that keyword names a *view* (:data:`VIEWS`). Which entries it clears
is each category's own link target (``link_section``): the entries whose link leads to
what was just shown, so a host's own category is cleared too.
Like ``emit``, it writes in the caller's transaction and never commits; the reader's
other tabs hear of it after the caller commits.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from .. import dialects
from ..categories import Registry
from ..state import state
from . import entries, live

log = logging.getLogger(__name__)

#: The views a host can say it showed (``mark_seen``'s ``section``), and the link target
#: (``Category.link_section``) of the entries each clears.
VIEWS: dict[str, str | None] = {
    "page": None,
    "discussion": "comments",
    "review": "review",
}


def known_view(view: object) -> bool:
    """Whether ``view`` is one of :data:`VIEWS`' names (a list is not, and asks no dict)."""
    return isinstance(view, str) and view in VIEWS


def categories_shown_by(registry: Registry, view: str) -> list[str]:
    """The keys of the categories whose entries link to what ``view`` shows of a page."""
    if not known_view(view):
        # Named as the host passed it: ``mark_seen``'s ``section``.
        raise ValueError(f"section is {view!r}; use one of {sorted(VIEWS)}")
    target = VIEWS[view]
    return [key for key, category in registry.items() if category.link_section == target]


def mark_seen(user_id: Any, page_id: Any, view: str) -> int:
    """Mark ``user_id``'s unread entries about ``page_id`` read, of every category that
    links to what ``view`` shows of it; cancels the mail they were waiting for. Returns
    how many.

    A read first, so that an ordinary page view with nothing unread writes nothing (on
    SQLite an UPDATE takes the database's one write lock even when it matches no row);
    then one UPDATE in the caller's transaction, in a SAVEPOINT on PostgreSQL. A failure
    here is logged, never raised, and never costs the caller its own transaction; so is
    a view it does not know (the page view goes on, clearing nothing).
    """
    if not known_view(view):
        log.warning("wikinotify: mark_seen was given section %r; it knows %s", view,
                    sorted(VIEWS))
        return 0
    st = state()
    categories = categories_shown_by(st.registry, view)
    session = st.db.session()  # the app context's Session, which the proxy hands out
    reader, page = str(user_id), str(page_id)
    try:
        if not entries.has_unread_on_page(session, reader, page, categories):
            return 0
        with dialects.savepoint(session):
            count = entries.mark_page_read(session, reader, page, categories)
    except SQLAlchemyError:
        log.exception("wikinotify: could not mark %s of page %s read", view, page_id)
        return 0
    if count:
        live.changed_at_commit(session, [reader])  # their badges, after the commit
    return count


