"""The wiki's operations: one function per thing a person does, each ending in a commit.

Views check permissions and call these; each operation has the page (or comment) as it
was and as it becomes in one place, which is where its notification event is emitted:
inside the operation's transaction, before its commit, so a rolled-back operation leaves
no event (docs/rules.md#emit). Permissions are computed by :mod:`demo.access` from the groups and
their page rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import sqlalchemy as sa
from flask import has_request_context, request
from sqlalchemy.orm import joinedload

from . import access
from .extensions import notify
from .models import (
    PERMISSIONS,
    PUBLISH_STATES,
    ApprovalRule,
    Comment,
    Group,
    Page,
    Revision,
    Site,
    Submission,
    User,
    Watch,
    approval_reviewers,
    db,
    user_groups,
)

#: Last path segments the page routes use for actions, so no page may end in one.
RESERVED_SEGMENTS = frozenset({"edit", "move", "delete", "watch", "unwatch", "comments", "suggest"})
MAX_BODY = 10_000
#: How much of a comment a notification shows (docs/rules.md#entries: never the page content).
EXCERPT_LENGTH = 200


class WikiError(ValueError):
    """An operation refused; the message is meant for the person who asked."""


class Publishing(NamedTuple):
    state: str
    start: datetime | None = None
    end: datetime | None = None


# -- sites and permissions ---------------------------------------------------------------


#: Where a request keeps its site once found (the request's own, not ``g``: an app
#: context may outlive many requests); forgotten with the request (:func:`forget_kept`).
_SITE = "demo.site"


def current_site() -> Site | None:
    """The site whose hostname is the request's host (port ignored), else the default:
    found once a request (the locale, the views and wikinotify each ask), by the account's
    own statement on a signed-in request (:func:`load_account`)."""
    hostname = _hostname()
    kept = request.environ.get(_SITE)
    if kept is None or kept[0] != hostname:
        _keep_site(hostname, db.session.scalar(_SITE_FOR_HOST, {"hostname": hostname}))
    site: Site | None = request.environ[_SITE][1]
    return site


def _hostname() -> str | None:
    return urlsplit(f"//{request.host}").hostname


def _keep_site(hostname: str | None, site: Site | None) -> None:
    request.environ[_SITE] = (hostname, site)


#: The site named ``hostname`` and nothing else (``flask demo`` commands).
_SITE_BY_NAME = sa.select(Site).where(Site.hostname == sa.bindparam("hostname"))
#: Which site is the default: the one marked so, else the first made.
_DEFAULT_FIRST = (Site.is_default.desc(), Site.id)
#: The statements a signed-in request sends (this and :data:`_ACCOUNT_AND_SITE`), made
#: once and then only bound: building a statement and its cache key cost more Python than
#: its round trip (py-spy, bench/inbox_scale.py). The id of the site named ``hostname``,
#: else the default's (:func:`default_site`): one statement, also for a host no site names
#: (an address, a proxy's name), which was two round trips a request. The sites are a
#: handful of rows.
_SITE_ID_FOR_HOST = sa.select(Site.id).order_by(
    (Site.hostname == sa.bindparam("hostname")).desc().nulls_last(), *_DEFAULT_FIRST
).limit(1).scalar_subquery().correlate(None)  # its own read of the sites, never the outer
_SITE_FOR_HOST = sa.select(Site).where(Site.id == _SITE_ID_FOR_HOST)


def find_site(hostname: str | None) -> Site | None:
    return db.session.scalar(_SITE_BY_NAME, {"hostname": hostname})


def default_site() -> Site | None:
    query = sa.select(Site).order_by(*_DEFAULT_FIRST).limit(1)
    return db.session.scalar(query)


def member_of(user_id: Any) -> sa.ScalarSelect[Any]:
    """The account's group ids as one text (``"1,4"``), a subquery per account on the
    membership's primary key: the host's facts read it beside each account (joined and
    grouped instead, PostgreSQL read the whole membership table for every fan-out batch)."""
    return (
        sa.select(sa.func.aggregate_strings(sa.cast(user_groups.c.group_id, sa.String), ","))
        .where(user_groups.c.user_id == user_id)
        .scalar_subquery()
    )


#: Where a request keeps the account Flask-Login loaded, with its groups (see
#: :func:`load_account`); forgotten with the request (:func:`forget_kept`).
_ACCOUNT = "demo.account"
_ACCOUNT_WITH_GROUPS = sa.select(User, member_of(User.id)).where(
    User.id == sa.bindparam("user_id"))
#: The same, and the request's site beside it (:func:`current_site`).
_ACCOUNT_AND_SITE = _ACCOUNT_WITH_GROUPS.add_columns(Site).outerjoin(
    Site, Site.id == _SITE_ID_FOR_HOST)


def load_account(user_id: int) -> User | None:
    """The signed-in account, loaded once a request by Flask-Login, its groups read in the
    same statement and kept for the request: wikinotify asks for the caller's facts
    (groups, language, zone) on every page it serves, and that was a second statement
    reading the same row (:meth:`demo.host.DemoHost.user`). In a request that has not
    found its site yet, the site too: every signed-in page needs both, and they were two
    round trips of the three a signed-in request pays before its view."""
    if not has_request_context():
        row = db.session.execute(_ACCOUNT_WITH_GROUPS, {"user_id": user_id}).first()
        return None if row is None else row[0]
    hostname = _hostname()
    kept = request.environ.get(_SITE)
    if kept is not None and kept[0] == hostname:
        row = db.session.execute(_ACCOUNT_WITH_GROUPS, {"user_id": user_id}).first()
    else:
        row = db.session.execute(_ACCOUNT_AND_SITE,
                                 {"user_id": user_id, "hostname": hostname}).first()
        if row is not None:
            _keep_site(hostname, row[2])
    if row is None:
        return None
    request.environ[_ACCOUNT] = (row[0], row[1])
    return row[0]


def forget_kept(_error: BaseException | None = None) -> None:
    """Forget the site and account this request kept (the app's teardown of every
    request): the server holds a streamed response's environ for the stream's life, and
    every open stream kept its account's row there."""
    if has_request_context():
        for name in (_SITE, _ACCOUNT):
            request.environ.pop(name, None)


def loaded_account(user_id: int) -> tuple[User, str | None] | None:
    """The account :func:`load_account` loaded on this request, if it is ``user_id``'s, and
    its group ids as text."""
    kept = request.environ.get(_ACCOUNT) if has_request_context() else None
    if kept is None or kept[0].id != user_id:
        return None
    return kept[0], kept[1]


# The rules joined in: one statement, not one for the groups and one for their rules.
_GRANTS = sa.select(Group).where(Group.id.in_(sa.bindparam("ids", expanding=True))).options(
    joinedload(Group.rules))


def grants(group_ids: Iterable[int]) -> list[access.Grant]:
    """The groups ``group_ids`` with their page rules, as :mod:`demo.access` reads them."""
    return [
        access.Grant(
            frozenset(group.permissions),
            tuple(
                access.Rule(rule.path_prefix, frozenset(rule.permissions), rule.deny)
                for rule in group.rules
            ),
        )
        for group in db.session.scalars(_GRANTS, {"ids": list(group_ids)}).unique()
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


def _user_id(user: User | None) -> int | None:
    return user.id if user is not None else None


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


def excerpt(body: str) -> str:
    return body[:EXCERPT_LENGTH]


def _emit(
    kind: str,
    page: Page,
    user: User | None,
    variant: str,
    *,
    snapshot_extra: Mapping[str, Any] | None = None,
    **fields: Any,
) -> None:
    """Record ``kind`` about ``page`` in the current transaction (docs/rules.md#emit).

    The snapshot is the page as it is now plus ``snapshot_extra``; ``fields`` are the
    comment or submission id, the idempotency ``key`` (a revision's or a comment's id) and
    what a category reads besides (a reply's ``parent_id``, a comment's ``text``).
    """
    notify.emit(
        kind,
        site_id=page.site_id,
        actor_id=_user_id(user),
        page_id=page.id,
        snapshot={**page_snapshot(page), **(snapshot_extra or {})},
        variant=variant,
        **fields,
    )


def revision_count(page: Page) -> int:
    query = sa.select(sa.func.count()).select_from(Revision).where(Revision.page_id == page.id)
    return db.session.scalar(query) or 0


def comment_count(page: Page) -> int:
    query = sa.select(sa.func.count()).select_from(Comment).where(Comment.page_id == page.id)
    return db.session.scalar(query) or 0


def tags_of(pages: Iterable[Page]) -> list[str]:
    return sorted({tag for page in pages for tag in page.tags or []})


def folders_of(pages: Iterable[Page]) -> list[str]:
    """Every folder holding one of ``pages``: ``a/b/c`` is in ``a`` and in ``a/b``."""
    folders = set()
    for page in pages:
        segments = page.path.split("/")
        folders.update("/".join(segments[:end]) for end in range(1, len(segments)))
    return sorted(folders)


def is_watching(page: Page, user: User) -> bool:
    return db.session.get(Watch, (page.id, user.id)) is not None


def own_submission(page: Page, user: User) -> Submission | None:
    """``user``'s suggestion for ``page``, open or already answered."""
    query = sa.select(Submission).where(
        Submission.page_id == page.id, Submission.author_id == user.id
    )
    return db.session.scalar(query)


def reviewer_groups(site_id: int | None, path: str) -> sa.Select | None:
    """The ids of the groups reviewing suggestions to ``path`` on the site: those named by
    every enabled approval rule whose prefix starts the path (docs/rules.md#reviewers); ``None`` if
    none."""
    rules = db.session.scalars(
        sa.select(ApprovalRule).where(ApprovalRule.site_id == site_id, ApprovalRule.enabled)
    )
    rule_ids = [rule.id for rule in rules if path.startswith(rule.path_prefix)]
    if not rule_ids:
        return None
    return sa.select(approval_reviewers.c.group_id).where(
        approval_reviewers.c.rule_id.in_(rule_ids)
    )


def may_review(page: Page, user: Any) -> bool:
    """Whether ``user`` answers suggestions to ``page``: only reviewer groups do
    (docs/rules.md#reviewers), whatever else they may do there."""
    groups = reviewer_groups(page.site_id, page.path)
    if groups is None or not getattr(user, "is_authenticated", False):
        return False
    member = sa.exists().where(user_groups.c.user_id == user.id, user_groups.c.group_id.in_(groups))
    return bool(db.session.scalar(sa.select(member)))


def open_suggestions(page: Page) -> list[Submission]:
    """The suggestions to ``page`` waiting for review, oldest first."""
    query = sa.select(Submission).where(Submission.page_id == page.id, Submission.status == "open")
    return list(db.session.scalars(query.order_by(Submission.updated_at, Submission.id)))


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
    user: User | None,
    path: str,
    title: str,
    content: str,
    *,
    tags: list[str] | None = None,
    publishing: Publishing | None = None,
    snapshot_extra: Mapping[str, Any] | None = None,
) -> Page:
    """Create the page at ``path`` on ``site``, or update it, and record a revision.

    ``tags`` and ``publishing`` are left as they are when ``None``. A save that changes
    nothing writes nothing, so it leaves no revision (and tells no one). ``user`` is
    ``None`` for an import no account is named for. ``snapshot_extra`` joins an edit's
    snapshot (who suggested what a reviewer approved).
    """
    path, title = normalize_path(path), title.strip()
    if not title:
        raise WikiError("A page needs a title.")
    if publishing is not None and publishing.state not in PUBLISH_STATES:
        raise WikiError("Unknown publish state.")
    page = find_page(site, path)
    created = page is None
    if page is None:
        page = Page(site_id=site.id, path=path, author_id=_user_id(user), tags=[])
        db.session.add(page)
    elif _unchanged(page, title, content, tags, publishing):
        return page
    before = _publishing_of(page)  # for an edit, the "before" of its variant
    page.title, page.content = title, content
    if tags is not None:
        page.tags = tags
    if publishing is not None:
        page.publish_state, page.publish_start, page.publish_end = publishing
    revision = Revision(title=title, content=content, author_id=_user_id(user))
    page.revisions.append(revision)
    db.session.flush()  # page.id, revision.id (and a new page's defaults) exist from here on
    # The revision is the save's idempotency key: a retried save of it notifies once.
    if created:
        _emit("page:create", page, user, "created", key=revision.id)
    else:
        _emit("page:edit", page, user, _edit_variant(before, _publishing_of(page)),
              key=revision.id, snapshot_extra=snapshot_extra)
    db.session.commit()
    return page


def _publishing_of(page: Page) -> Publishing:
    return Publishing(page.publish_state, page.publish_start, page.publish_end)


def _unchanged(
    page: Page, title: str, content: str, tags: list[str] | None, publishing: Publishing | None
) -> bool:
    return (
        (page.title, page.content) == (title, content)
        and tags in (None, page.tags)
        and publishing in (None, _publishing_of(page))
    )


def _edit_variant(before: Publishing, after: Publishing) -> str:
    """Which ``watchedPage`` message an edit is (docs/rules.md#the-launch-categories).

    A change of state says the most, then a new publish window; a window taking effect
    later is not an event at all (docs/rules.md#corner-cases), so setting it is the only moment to
    tell.
    """
    if before.state != after.state:
        return "published" if after.state == "published" else "unpublished"
    if (before.start, before.end) != (after.start, after.end):
        return "scheduled"
    return "edited"


def move_page(page: Page, user: User, new_path: str) -> Page:
    """Move ``page`` to ``new_path`` on its site; ``user`` is who moved it."""
    new_path = normalize_path(new_path)
    if new_path == page.path:
        return page
    if find_page(page.site, new_path) is not None:
        raise WikiError(f"A page already exists at {new_path}.")
    previous_path = page.path
    page.path = new_path
    _emit("page:rename", page, user, "moved", snapshot_extra={"previous_path": previous_path})
    db.session.commit()
    return page


def delete_page(page: Page, user: User) -> None:
    """Delete ``page`` with its revisions, watches, comments and suggestions."""
    _delete_page(page, user)
    db.session.commit()


def _delete_page(page: Page, user: User) -> None:
    """The one way a page row goes: every deletion path tells its watchers
    (docs/rules.md#deleting-a-page)."""
    # Emitted first: the event captures the watchers in its own INSERT, while the watch
    # rows that go with the page can still be read.
    _emit("page:delete", page, user, "deleted")
    db.session.delete(page)


def delete_pages_by_tag(site: Site, user: User, tag: str) -> int:
    """Delete every page of ``site`` tagged ``tag`` that ``user`` may write; how many."""
    # Matched in Python: JSON containment is spelled differently on SQLite and PostgreSQL.
    pages = db.session.scalars(sa.select(Page).where(Page.site_id == site.id).order_by(Page.id))
    return _delete_writable([page for page in pages if tag in (page.tags or [])], user)


def delete_folder(site: Site, user: User, prefix: str) -> int:
    """Delete every page under the folder ``prefix`` (``a/b`` holds ``a/b/c``, not ``a/b``
    itself) that ``user`` may write; how many."""
    prefix = prefix.strip().strip("/")
    if not prefix:
        raise WikiError("Name the folder to delete.")
    query = sa.select(Page).where(
        Page.site_id == site.id, Page.path.startswith(prefix + "/", autoescape=True)
    )
    return _delete_writable(list(db.session.scalars(query.order_by(Page.id))), user)


def _delete_writable(pages: list[Page], user: User) -> int:
    held = user_grants(user)
    writable = [page for page in pages if access.holds(held, "write:pages", page.path)]
    # "bulk": each page's watchers hear of it, the opt-in "deleted pages" firehose does not
    # (docs/rules.md#origin). One transaction, so a failure part-way deletes nothing.
    with notify.bulk():
        for page in writable:
            _delete_page(page, user)
    db.session.commit()
    return len(writable)


def import_pages(site: Site, user: User | None, records: list[dict]) -> int:
    """Create or update a page per record (``path``, ``title``, ``content``); how many
    records were imported.

    Every record is checked before the first is saved, so a bad file writes nothing.
    Records named for ``user`` need their ``write:pages``; with ``user=None`` (an
    operator's import, no account acting) no permission is checked.
    """
    checked = [_import_record(number, record, user) for number, record in enumerate(records, 1)]
    # "import": watchers hear of pages the import rewrote, the opt-in "new pages" firehose
    # does not hear of every page it created (docs/rules.md#origin).
    with notify.importing():
        for path, title, content in checked:
            save_page(site, user, path, title, content)
    return len(checked)


def _import_record(number: int, record: Any, user: User | None) -> tuple[str, str, str]:
    """``record`` as (path, title, content), or a WikiError naming the record."""
    fields = ("path", "title", "content")
    if not isinstance(record, dict) or not all(isinstance(record.get(f), str) for f in fields):
        raise WikiError(f"Record {number} needs a path, a title and a content, all text.")
    try:
        path = normalize_path(record["path"])
    except WikiError as error:
        raise WikiError(f"Record {number}: {error}") from None
    if not record["title"].strip():
        raise WikiError(f"Record {number} ({path}) has no title.")
    if user is not None and not access.holds(user_grants(user), "write:pages", path):
        raise WikiError(f"Record {number}: {user.username} may not write {path}.")
    return path, record["title"], record["content"]


def watch(page: Page, user: User) -> None:
    if not is_watching(page, user):
        db.session.add(Watch(page_id=page.id, user_id=user.id, site_id=page.site_id))
        db.session.commit()


def unwatch(page: Page, user: User) -> None:
    watch_row = db.session.get(Watch, (page.id, user.id))
    if watch_row is not None:
        db.session.delete(watch_row)
        db.session.commit()


def leave_group(user: User, group: Group) -> None:
    """Take ``user`` out of ``group``. What she may read changes with no event to emit:
    wikinotify is told in the same transaction (docs/adopting.md#kept-pages)."""
    if group in user.groups:
        user.groups.remove(group)
        notify.access_changed()
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
    _emit(
        "comment:new",
        page,
        user,
        "new",
        comment_id=comment.id,
        key=comment.id,
        # As text, like every id wikinotify is given (emit converts only its own fields).
        parent_id=str(parent.id) if parent is not None else None,
        text=body,
        snapshot_extra={"excerpt": excerpt(body)},
    )
    db.session.commit()
    return comment


def edit_comment(comment: Comment, user: User, body: str) -> Comment:
    """Replace the text of ``comment`` (its author's own)."""
    body = _clean_body(body)
    if body == comment.body:
        return comment
    # Only handles that were not mentioned before are told (docs/rules.md#the-launch-categories,
    # docs/rules.md#corner-cases).
    previous = comment.body
    comment.body = body
    _emit(
        "comment:edit",
        comment.page,
        user,
        "edited",
        comment_id=comment.id,
        text=body,
        previous_text=previous,
        snapshot_extra={"excerpt": excerpt(body)},
    )
    db.session.commit()
    return comment


def delete_comment(comment: Comment, user: User) -> None:
    """Delete ``comment``; its replies stay, as roots of their own threads."""
    # No category listens yet, so this writes nothing; it is where one would hear of it.
    _emit("comment:delete", comment.page, user, "deleted", comment_id=comment.id,
          key=comment.id)
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
    if submission is not None and submission.status == "open" and submission.content == content:
        return submission
    # Only revising a suggestion still in the queue is an update (docs/rules.md#reviewers);
    # reopening a closed one asks for a review afresh.
    kind = "submission:update" if submission and submission.status == "open" else "submission:new"
    if submission is None:
        submission = Submission(page_id=page.id, author_id=user.id, content=content)
        db.session.add(submission)
    submission.content, submission.status = content, "open"
    db.session.flush()  # submission.id exists from here on
    _emit(
        kind,
        page,
        user,
        "updated" if kind == "submission:update" else "new",
        submission_id=submission.id,
        snapshot_extra={"suggested_by": user.name},
    )
    db.session.commit()
    return submission


def review_suggestion(submission: Submission, reviewer: User, *, approve: bool) -> Page:
    """Approve ``submission`` (its content becomes the reviewer's revision of the page)
    or reject it (the page is left as it is); the suggester is told which (docs/rules.md#emit).

    Only an open suggestion is answered, and only once: the status moves with a
    conditional UPDATE, so of two reviewers answering at once, one is refused.
    """
    outcome = "approved" if approve else "rejected"
    answered = db.session.execute(
        sa.update(Submission)
        .where(Submission.id == submission.id, Submission.status == "open")
        .values(status=outcome)
    )
    if answered.rowcount != 1:
        db.session.rollback()
        raise WikiError("This suggestion has already been answered.")
    page, author = submission.page, submission.author
    suggested_by = {"suggested_by": author.name, "submission_id": str(submission.id)}
    _emit(
        "submission:review",
        page,
        reviewer,
        outcome,
        submission_id=submission.id,
        # As text, like every id wikinotify is given: the one person told.
        suggester_id=str(author.id),
        snapshot_extra=suggested_by,
    )
    if approve:
        # What an approval emits: a page:edit whose actor is the reviewer,
        # its snapshot naming who suggested it, so watchers hear it from the reviewer.
        # Its commit is the answer's too: one transaction for the status, both events
        # and the revision.
        save_page(page.site, reviewer, page.path, page.title, submission.content,
                  snapshot_extra=suggested_by)
    db.session.commit()  # a rejection's, or an approval that changed no line
    return page
