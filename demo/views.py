"""The demo wiki's pages and forms. Each view checks access, calls :mod:`demo.wiki` and
redirects (Post/Redirect/Get).

A page the user may not read answers 404, exactly like a page that does not exist, so its
path is not revealed; a page they may read but not change answers 403.

Opening a page, or its discussion tab, marks the notifications it answers read
(docs/rules.md#mail-cadence).
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    has_request_context,
    redirect,
    render_template,
    request,
    url_for,
)
from flask_babel import get_locale
from flask_login import current_user, login_required, login_user, logout_user
from werkzeug.routing import IntegerConverter, Map
from werkzeug.wrappers import Response

from wikinotify.blueprint.core import is_local_path

from . import wiki
from .extensions import notify
from .mailbox import SHOWN, clear_messages, list_messages
from .models import MAX_ROW_ID, Comment, Page, Site, Submission, User, db

blueprint = Blueprint("demo", __name__)


class RowIdConverter(IntegerConverter):
    """``<row_id:...>``: an id a demo table can hold; a larger one is a 404 before the
    database, which would refuse to compare it, is asked."""

    def __init__(self, url_map: Map) -> None:
        super().__init__(url_map, min=1, max=MAX_ROW_ID)


@blueprint.app_context_processor
def _inject_layout() -> dict:
    # For the layout, which wikinotify's pages use too; mails rendered by a worker have
    # no request, and do not use the layout.
    if not has_request_context():
        return {}
    return {"demo_site": wiki.current_site(), "demo_locale": str(get_locale() or "en")}


@blueprint.errorhandler(wiki.WikiError)
def _refused(error: wiki.WikiError) -> tuple[str, int]:
    return render_template("demo/error.html", message=str(error)), 400


def _site() -> Site:
    site = wiki.current_site()
    if site is None:
        abort(503, "This wiki has no site yet: run `flask --app wsgi demo seed`.")
    return site


def _page(path: str, permission: str = "read:pages") -> tuple[Page, set[str]]:
    """The page at ``path`` on this site and the user's permissions on it, or 404/403."""
    page = wiki.find_page(_site(), path)
    held = wiki.permissions_on(current_user, path)
    if page is None or "read:pages" not in held:
        abort(404)
    if permission not in held:
        abort(403)
    return page, held


def _comment(comment_id: int) -> tuple[Comment, set[str]]:
    """The comment, if the user can see it on a page of this site, and their permissions."""
    comment = db.get_or_404(Comment, comment_id)
    held = wiki.permissions_on(current_user, comment.page.path)
    visible = {"read:pages", "read:comments"} <= held and comment.page.site_id == _site().id
    if not visible:
        abort(404)
    return comment, held


def _to_page(page: Page, anchor: str | None = None) -> Response:
    return redirect(url_for("demo.page", path=page.path, _anchor=anchor))


def _to_discussion(page: Page, anchor: str | None = None) -> Response:
    return redirect(url_for("demo.discussion", path=page.path, _anchor=anchor))


def _is_admin() -> bool:
    return bool(getattr(current_user, "is_admin", False))


def _mark_seen(page: Page, section: str) -> None:
    """The viewer has now seen ``section`` of ``page``: its entries are read
    (docs/rules.md#mail-cadence)."""
    if notify.mark_seen(current_user.id, page.id, section=section):
        db.session.commit()


# -- session ------------------------------------------------------------------------------


def _safe_next() -> str | None:
    """Where to go after logging in: only a path on this site (wikinotify's own check of
    its forms' ``next``), never another host nor a header split by a line break."""
    target = request.args.get("next") or ""
    return target if is_local_path(target) else None


@blueprint.get("/login")
def login() -> str:
    return render_template("demo/login.html")


@blueprint.post("/login")
def login_post() -> Response | tuple[str, int]:
    username = request.form.get("username", "").strip()
    user = db.session.scalar(sa.select(User).where(User.username == username))
    # login_user refuses an inactive account, which then reads as a wrong password.
    if user is None or not user.check_password(request.form.get("password", "")):
        user = None
    if user is None or not login_user(user):
        error = "Wrong username or password."
        return render_template("demo/login.html", error=error, username=username), 401
    # Accounts belong to no site: mail about the whole wiki goes out with the one signed
    # in on last (DemoHost.last_site_id).
    site = wiki.current_site()
    if site is not None:
        user.last_site_id = site.id
        db.session.commit()
    return redirect(_safe_next() or url_for("demo.index"))


@blueprint.post("/logout")
def logout() -> Response:
    logout_user()
    return redirect(url_for("demo.index"))


# -- pages ----------------------------------------------------------------------------------


@blueprint.get("/")
def index() -> str:
    pages = wiki.readable_pages(_site(), current_user)
    # Administrators get bulk deletion forms, one per tag and folder they can see.
    admin = _is_admin()
    return render_template(
        "demo/index.html",
        pages=pages,
        tags=wiki.tags_of(pages) if admin else [],
        folders=wiki.folders_of(pages) if admin else [],
    )


@blueprint.get("/new")
@login_required
def new_page() -> Response:
    path = wiki.normalize_path(request.args.get("path", ""))
    return redirect(url_for("demo.edit", path=path))


@blueprint.get("/pages/<path:path>")
@login_required
def page(path: str) -> str:
    page, held = _page(path)
    _mark_seen(page, "page")
    return render_template(
        "demo/page.html",
        page=page,
        held=held,
        revisions=wiki.revision_count(page),
        watching=wiki.is_watching(page, current_user),
        comments=wiki.comment_count(page) if "read:comments" in held else None,
        own_suggestion=wiki.own_submission(page, current_user),
        # Reviewers answer suggestions here, each at #suggestion-<id> (Host.suggestion_url).
        reviewable=wiki.open_suggestions(page) if wiki.may_review(page, current_user) else [],
    )


@blueprint.get("/pages/<path:path>/comments")
@login_required
def discussion(path: str) -> str:
    page, held = _page(path, "read:comments")
    _mark_seen(page, "discussion")
    return render_template(
        "demo/discussion.html",
        page=page,
        held=held,
        thread=wiki.comment_thread(page),
        can_edit_comment=wiki.can_edit_comment,
        can_delete_comment=wiki.can_delete_comment,
    )


def _editable(path: str) -> Page | None:
    """The page to edit at ``path`` (None: it will be created), or 404/403."""
    path = wiki.normalize_path(path)
    page = wiki.find_page(_site(), path)
    held = wiki.permissions_on(current_user, path)
    if page is not None and "read:pages" not in held:
        abort(404)
    if "write:pages" not in held:
        abort(403)
    return page


@blueprint.get("/pages/<path:path>/edit")
@login_required
def edit(path: str) -> str:
    return render_template("demo/edit.html", page=_editable(path), path=path)


def _publishing() -> wiki.Publishing | None:
    """The publish fields of the edit form, or None when it sent none (keep them)."""
    if "publish_state" not in request.form:
        return None
    start, end = (_form_datetime(name) for name in ("publish_start", "publish_end"))
    return wiki.Publishing(request.form["publish_state"], start, end)


def _form_datetime(name: str) -> datetime | None:
    # <input type="datetime-local"> has no time zone; the demo reads it as UTC.
    value = request.form.get(name, "").strip()
    try:
        return datetime.fromisoformat(value).replace(tzinfo=UTC) if value else None
    except ValueError:
        raise wiki.WikiError(f"{name} is not a date and time.") from None


def _form_tags() -> list[str] | None:
    if "tags" not in request.form:
        return None
    return [tag.strip() for tag in request.form["tags"].split(",") if tag.strip()]


@blueprint.post("/pages/<path:path>/edit")
@login_required
def edit_post(path: str) -> Response:
    _editable(path)
    page = wiki.save_page(
        _site(),
        current_user,
        path,
        request.form.get("title", ""),
        request.form.get("content", ""),
        tags=_form_tags(),
        publishing=_publishing(),
    )
    flash("Page saved.")
    return _to_page(page)


@blueprint.post("/pages/<path:path>/move")
@login_required
def move(path: str) -> Response:
    page, _ = _page(path, "write:pages")
    new_path = wiki.normalize_path(request.form.get("new_path", ""))
    if "write:pages" not in wiki.permissions_on(current_user, new_path):
        abort(403)
    wiki.move_page(page, current_user, new_path)
    flash(f"Page moved to {page.path}.")
    return _to_page(page)


@blueprint.post("/pages/<path:path>/delete")
@login_required
def delete(path: str) -> Response:
    page, _ = _page(path, "write:pages")
    wiki.delete_page(page, current_user)
    flash(f"Page {path} deleted.")
    return redirect(url_for("demo.index"))


@blueprint.post("/tags/<tag>/delete")
@login_required
def delete_tag(tag: str) -> Response:
    if not _is_admin():
        abort(403)
    count = wiki.delete_pages_by_tag(_site(), current_user, tag)
    flash(f"Deleted {count} page{'' if count == 1 else 's'} tagged “{tag}”.")
    return redirect(url_for("demo.index"))


@blueprint.post("/folders/<path:prefix>/delete")
@login_required
def delete_folder(prefix: str) -> Response:
    if not _is_admin():
        abort(403)
    count = wiki.delete_folder(_site(), current_user, prefix)
    flash(f"Deleted {count} page{'' if count == 1 else 's'} under {prefix}/.")
    return redirect(url_for("demo.index"))


@blueprint.post("/pages/<path:path>/watch")
@login_required
def watch(path: str) -> Response:
    page, _ = _page(path)
    wiki.watch(page, current_user)
    flash("You are watching this page.")
    return _to_page(page)


@blueprint.post("/pages/<path:path>/unwatch")
@login_required
def unwatch(path: str) -> Response:
    page, _ = _page(path)
    wiki.unwatch(page, current_user)
    flash("You no longer watch this page.")
    return _to_page(page)


@blueprint.post("/pages/<path:path>/suggest")
@login_required
def suggest(path: str) -> Response:
    page, _ = _page(path)
    wiki.suggest(page, current_user, request.form.get("content", ""))
    flash("Suggestion sent for review.")
    return _to_page(page)


def _reviewable(submission_id: int) -> Submission:
    """The suggestion, if the user can read its page on this site (else 404) and reviews
    it (else 403)."""
    submission = db.get_or_404(Submission, submission_id)
    page, _ = _page(submission.page.path)
    if page.id != submission.page_id:  # the same path on another site
        abort(404)
    if not wiki.may_review(page, current_user):
        abort(403)
    return submission


@blueprint.post("/submissions/<row_id:submission_id>/approve")
@login_required
def approve_suggestion(submission_id: int) -> Response:
    page = wiki.review_suggestion(_reviewable(submission_id), current_user, approve=True)
    flash("Suggestion approved: it is the page now.")
    return _to_page(page)


@blueprint.post("/submissions/<row_id:submission_id>/reject")
@login_required
def reject_suggestion(submission_id: int) -> Response:
    page = wiki.review_suggestion(_reviewable(submission_id), current_user, approve=False)
    flash("Suggestion rejected.")
    return _to_page(page, "suggest")


# -- comments -------------------------------------------------------------------------------


def _parent_id() -> int | None:
    value = request.form.get("parent_id", "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 10 or int(value) > MAX_ROW_ID:
        raise wiki.WikiError("The comment you replied to is not on this page.")
    return int(value)


@blueprint.post("/pages/<path:path>/comments")
@login_required
def comment(path: str) -> Response:
    page, _ = _page(path, "write:comments")
    added = wiki.add_comment(page, current_user, request.form.get("body", ""), _parent_id())
    return _to_discussion(page, f"comment-{added.id}")


@blueprint.post("/comments/<row_id:comment_id>/edit")
@login_required
def edit_comment(comment_id: int) -> Response:
    comment, held = _comment(comment_id)
    if not wiki.can_edit_comment(current_user, comment) or "write:comments" not in held:
        abort(403)
    wiki.edit_comment(comment, current_user, request.form.get("body", ""))
    return _to_discussion(comment.page, f"comment-{comment.id}")


@blueprint.post("/comments/<row_id:comment_id>/delete")
@login_required
def delete_comment(comment_id: int) -> Response:
    comment, _ = _comment(comment_id)
    if not wiki.can_delete_comment(current_user, comment):
        abort(403)
    page = comment.page
    wiki.delete_comment(comment, current_user)
    flash("Comment deleted.")
    return _to_discussion(page)


# -- the demo's mailbox ---------------------------------------------------------------------


def _mailbox_folder() -> str:
    """The sink's folder, for an administrator only: it holds every account's mail,
    unsubscribe links included. Without the sink there is no mailbox (404): ``demo run``
    sets DEMO_MAILBOX for its own web process when it starts one."""
    folder = current_app.config.get("DEMO_MAILBOX")
    if not folder:
        abort(404)
    if not _is_admin():
        abort(403)
    return folder


@blueprint.get("/demo/mailbox")
@login_required
def mailbox() -> str:
    # Every message, whoever it was sent to: this is the demo's catch-all SMTP sink (every
    # account's mail lands in one folder), not a user's mailbox.
    messages = list_messages(_mailbox_folder())
    return render_template("demo/mailbox.html", messages=messages, shown=SHOWN)


@blueprint.post("/demo/mailbox/clear")
@login_required
def clear_mailbox() -> Response:
    count = clear_messages(_mailbox_folder())
    flash(f"Deleted {count} message{'' if count == 1 else 's'}.")
    return redirect(url_for("demo.mailbox"))
