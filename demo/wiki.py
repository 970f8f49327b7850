"""The wiki's operations: one function per thing a person does, each ending in a commit.

Views check permissions and call these; each operation has the page (or comment) as it
was and as it becomes in one place, which is where a notification event belongs.
Permissions are computed by :mod:`demo.access` from the groups and their page rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import sqlalchemy as sa
from flask import request
from sqlalchemy.orm import selectinload

from . import access
from .models import (
    PERMISSIONS,
    PUBLISH_STATES,
    Comment,
    Group,
    Page,
    Revision,
    Site,
    Submission,
    User,
    Watch,
    db,
)

#: Last path segments the page routes use for actions, so no page may end in one.
RESERVED_SEGMENTS = frozenset({"edit", "move", "delete", "watch", "unwatch", "comments", "suggest"})
MAX_BODY = 10_000


class WikiError(ValueError):
    """An operation refused; the message is meant for the person who asked."""


class Publishing(NamedTuple):
    state: str
    start: datetime | None = None
    end: datetime | None = None


# -- sites and permissions ---------------------------------------------------------------


def current_site() -> Site | None:
    """The site whose hostname is the request's host (port ignored), else the default."""
    hostname = urlsplit(f"//{request.host}").hostname
    site = db.session.scalar(sa.select(Site).where(Site.hostname == hostname))
    if site is None:
        query = sa.select(Site).order_by(Site.is_default.desc(), Site.id).limit(1)
        site = db.session.scalar(query)
    return site


def grants(group_ids: Iterable[int]) -> list[access.Grant]:
    """The groups ``group_ids`` with their page rules, as :mod:`demo.access` reads them."""
    query = sa.select(Group).where(Group.id.in_(list(group_ids))).options(selectinload(Group.rules))
    return [
        access.Grant(
            frozenset(group.permissions),
            tuple(
                access.Rule(rule.path_prefix, frozenset(rule.permissions), rule.deny)
                for rule in group.rules
            ),
        )
        for group in db.session.scalars(query)
    ]


def user_grants(user: Any) -> list[access.Grant]:
    """The grants of ``user``'s groups; a guest has none, so a guest may do nothing."""
    if not getattr(user, "is_authenticated", False):
        return []
    return grants(group.id for group in user.groups)


def permissions_on(user: Any, path: str) -> set[str]:
    """Every permission ``user`` holds on the page at ``path``."""
    held = user_grants(user)
    return {permission for permission in PERMISSIONS if access.holds(held, permission, path)}


def readable_pages(site: Site, user: Any) -> list[Page]:
    """The pages of ``site`` that ``user`` may read, by path."""
    held = user_grants(user)
    pages = db.session.scalars(sa.select(Page).where(Page.site_id == site.id).order_by(Page.path))
    return [page for page in pages if access.holds(held, "read:pages", page.path)]


def can_edit_comment(user: Any, comment: Comment) -> bool:
    return getattr(user, "is_authenticated", False) and comment.author_id == user.id


def can_delete_comment(user: Any, comment: Comment) -> bool:
    return can_edit_comment(user, comment) or bool(getattr(user, "is_admin", False))


# -- reading -------------------------------------------------------------------------------


def normalize_path(path: str) -> str:
    """``path`` without surrounding slashes; refuses what no page may be called."""
    path = path.strip().strip("/")
    segments = path.split("/")
    if not path or any(s.strip() in ("", ".", "..") for s in segments):
        raise WikiError("That is not a valid page path.")
    if len(path) > 255:
        raise WikiError("A page path is at most 255 characters.")
    if segments[-1] in RESERVED_SEGMENTS:
        raise WikiError(f"A page path cannot end in “{segments[-1]}”.")
    return path


def find_page(site: Site, path: str) -> Page | None:
    return db.session.scalar(sa.select(Page).where(Page.site_id == site.id, Page.path == path))


def page_snapshot(page: Page) -> dict[str, Any]:
    """The page as a notification and an access check see it (ids as strings)."""
    return {
        "id": str(page.id),
        "site_id": str(page.site_id),
        "path": page.path,
        "locale": page.locale,
        "title": page.title,
        "tags": list(page.tags or []),
        "publish_state": page.publish_state,
        "publish_start": page.publish_start.isoformat() if page.publish_start else None,
        "publish_end": page.publish_end.isoformat() if page.publish_end else None,
    }


def revision_count(page: Page) -> int:
    query = sa.select(sa.func.count()).select_from(Revision).where(Revision.page_id == page.id)
    return db.session.scalar(query) or 0


def is_watching(page: Page, user: User) -> bool:
    return db.session.get(Watch, (page.id, user.id)) is not None


def open_submission(page: Page, user: User) -> Submission | None:
    query = sa.select(Submission).where(
        Submission.page_id == page.id, Submission.author_id == user.id
    )
    submission = db.session.scalar(query)
    return submission if submission and submission.status == "open" else None


def comment_thread(page: Page) -> list[tuple[Comment, int]]:
    """The page's comments in reading order, each with its reply depth (0 for a root)."""
    ids = {comment.id for comment in page.comments}
    children: dict[int | None, list[Comment]] = defaultdict(list)
    for comment in page.comments:
        children[comment.parent_id if comment.parent_id in ids else None].append(comment)
    ordered: list[tuple[Comment, int]] = []
    stack = [(comment, 0) for comment in reversed(children[None])]
    while stack:  # depth-first without recursion, so a long thread cannot overflow
        comment, depth = stack.pop()
        ordered.append((comment, depth))
        stack.extend((reply, depth + 1) for reply in reversed(children[comment.id]))
    return ordered


# -- pages -----------------------------------------------------------------------------------


def save_page(
    site: Site,
    user: User,
    path: str,
    title: str,
    content: str,
    *,
    tags: list[str] | None = None,
    publishing: Publishing | None = None,
) -> Page:
    """Create the page at ``path`` on ``site``, or update it, and record a revision.

    ``tags`` and ``publishing`` are left as they are when ``None``. A save that changes
    nothing writes nothing, so it leaves no revision (and tells no one).
    """
    path, title = normalize_path(path), title.strip()
    if not title:
        raise WikiError("A page needs a title.")
    if publishing is not None and publishing.state not in PUBLISH_STATES:
        raise WikiError("Unknown publish state.")
    page = find_page(site, path)
    if page is None:
        page = Page(site_id=site.id, path=path, author_id=user.id, tags=[])
        db.session.add(page)
    elif _unchanged(page, title, content, tags, publishing):
        return page
    # Up to here `page` is as it was (for an edit, the "before" of a page:edit event).
    page.title, page.content = title, content
    if tags is not None:
        page.tags = tags
    if publishing is not None:
        page.publish_state, page.publish_start, page.publish_end = publishing
    page.revisions.append(Revision(title=title, content=content, author_id=user.id))
    db.session.flush()  # page.id exists from here on, for a newly created page too
    db.session.commit()
    return page


def _unchanged(
    page: Page, title: str, content: str, tags: list[str] | None, publishing: Publishing | None
) -> bool:
    current = Publishing(page.publish_state, page.publish_start, page.publish_end)
    return (
        (page.title, page.content) == (title, content)
        and tags in (None, page.tags)
        and publishing in (None, current)
    )


def move_page(page: Page, user: User, new_path: str) -> Page:
    """Move ``page`` to ``new_path`` on its site; ``user`` is who moved it."""
    new_path = normalize_path(new_path)
    if new_path == page.path:
        return page
    if find_page(page.site, new_path) is not None:
        raise WikiError(f"A page already exists at {new_path}.")
    page.path = new_path
    db.session.commit()
    return page


def delete_page(page: Page, user: User) -> None:
    """Delete ``page`` with its revisions, watches, comments and suggestions."""
    # A page:delete event must be written here, before the delete, while the watch rows
    # that go with the page can still be read (§6.3).
    db.session.delete(page)
    db.session.commit()


def watch(page: Page, user: User) -> None:
    if not is_watching(page, user):
        db.session.add(Watch(page_id=page.id, user_id=user.id, site_id=page.site_id))
        db.session.commit()


def unwatch(page: Page, user: User) -> None:
    watch_row = db.session.get(Watch, (page.id, user.id))
    if watch_row is not None:
        db.session.delete(watch_row)
        db.session.commit()


# -- comments and suggestions ---------------------------------------------------------------


def _clean_body(body: str) -> str:
    body = body.strip()
    if not body:
        raise WikiError("A comment cannot be empty.")
    if len(body) > MAX_BODY:
        raise WikiError(f"A comment is at most {MAX_BODY} characters.")
    return body


def add_comment(page: Page, user: User, body: str, parent_id: int | None = None) -> Comment:
    """Comment on ``page``, or reply to the comment ``parent_id`` on the same page."""
    body = _clean_body(body)
    parent = db.session.get(Comment, parent_id) if parent_id is not None else None
    if parent_id is not None and (parent is None or parent.page_id != page.id):
        raise WikiError("The comment you replied to is not on this page.")
    comment = Comment(page=page, author_id=user.id, parent=parent, body=body)
    db.session.add(comment)
    db.session.flush()  # comment.id exists from here on
    db.session.commit()
    return comment


def edit_comment(comment: Comment, user: User, body: str) -> Comment:
    """Replace the text of ``comment`` (its author's own)."""
    body = _clean_body(body)
    if body == comment.body:
        return comment
    # The previous body is still comment.body here: a comment:edit event needs it, since
    # only handles that were not mentioned before are told (§4.2).
    comment.body = body
    db.session.commit()
    return comment


def delete_comment(comment: Comment, user: User) -> None:
    """Delete ``comment``; its replies stay, as roots of their own threads."""
    db.session.delete(comment)
    db.session.commit()


def suggest(page: Page, user: User, content: str) -> Submission:
    """Suggest ``content`` for ``page``: one open suggestion per author per page.

    An open suggestion is revised in place; an approved or rejected one is reopened,
    since the unique (page, author) row is the author's only suggestion slot.
    """
    if not content.strip():
        raise WikiError("A suggestion cannot be empty.")
    query = sa.select(Submission).where(
        Submission.page_id == page.id, Submission.author_id == user.id
    )
    submission = db.session.scalar(query)
    if submission is None:
        submission = Submission(page_id=page.id, author_id=user.id, content=content)
        db.session.add(submission)
    elif submission.status == "open" and submission.content == content:
        return submission
    else:
        submission.content, submission.status = content, "open"
    db.session.flush()  # submission.id exists from here on
    db.session.commit()
    return submission
