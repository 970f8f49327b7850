"""The demo wiki's tables, all prefixed ``demo_``.

A small but real wiki schema: sites, accounts, groups with page rules, approval rules
naming reviewer groups, pages with revisions, watches, threaded comments and suggestions.
wikinotify never sees these tables; it reads them through :class:`demo.host.DemoHost`.

Deleting a page removes its revisions, watches, comments and suggestions through ORM
cascades as well as ``ON DELETE`` clauses: SQLite ignores the latter unless
``PRAGMA foreign_keys`` is on, and turning it on makes Alembic's batch migrations (which
drop and re-create tables) cascade-delete rows.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from flask import current_app
from flask_login import UserMixin
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from werkzeug.security import check_password_hash, generate_password_hash

# The same column type and constraint names as wikinotify's tables, so the two sets of
# tables read alike in one migration history.
from wikinotify.models import NAMING_CONVENTION, UTCDateTime, utcnow

PERMISSIONS = ("read:pages", "write:pages", "read:comments", "write:comments")
PUBLISH_STATES = ("published", "unpublished")
SUBMISSION_STATES = ("open", "approved", "rejected")
#: The largest id a demo table holds: its keys are INTEGER, 32 bits on PostgreSQL, which
#: refuses to compare one with a larger number. A larger id names nothing.
MAX_ROW_ID = 2**31 - 1


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


db = SQLAlchemy(model_class=Base)


class Site(db.Model):
    """One wiki site, chosen by the request's host name."""

    __tablename__ = "demo_sites"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    hostname: Mapped[str] = mapped_column(sa.String(255), unique=True)
    title: Mapped[str] = mapped_column(sa.String(255))
    base_url: Mapped[str] = mapped_column(sa.String(255))
    primary_locale: Mapped[str] = mapped_column(sa.String(16), default="en")
    is_default: Mapped[bool] = mapped_column(default=False)


user_groups = sa.Table(
    "demo_user_groups",
    Base.metadata,
    sa.Column("user_id", sa.ForeignKey("demo_users.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("group_id", sa.ForeignKey("demo_groups.id", ondelete="CASCADE"), primary_key=True),
    # Reviewer lookups read "members of these groups, by user id" (keyset pagination).
    sa.Index("ix_demo_user_groups_group_user", "group_id", "user_id"),
)

approval_reviewers = sa.Table(
    "demo_approval_reviewers",
    Base.metadata,
    sa.Column(
        "rule_id", sa.ForeignKey("demo_approval_rules.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("group_id", sa.ForeignKey("demo_groups.id", ondelete="CASCADE"), primary_key=True),
)


class User(UserMixin, db.Model):
    """An account; ``username`` is also its ``@handle``."""

    __tablename__ = "demo_users"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(sa.String(64), unique=True)
    email: Mapped[str | None] = mapped_column(sa.String(255))
    display_name: Mapped[str] = mapped_column(sa.String(255), default="")
    password_hash: Mapped[str] = mapped_column(sa.String(255), default="")
    verified: Mapped[bool] = mapped_column(default=True)
    active: Mapped[bool] = mapped_column(default=True)
    is_system: Mapped[bool] = mapped_column(default=False)
    is_admin: Mapped[bool] = mapped_column(default=False)
    locale: Mapped[str | None] = mapped_column(sa.String(16))
    timezone: Mapped[str | None] = mapped_column(sa.String(64))
    #: The site this account last signed in on: its instance-scoped mail goes out with it
    #: (:meth:`demo.host.DemoHost.last_site_id`).
    last_site_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("demo_sites.id", ondelete="SET NULL")
    )

    groups: Mapped[list[Group]] = relationship(secondary=user_groups, back_populates="members")

    @property
    def is_active(self) -> bool:
        # Flask-Login refuses to log in, or reload, an account that is not active.
        return self.active

    @property
    def name(self) -> str:
        return self.display_name or self.username

    def set_password(self, password: str) -> None:
        # scrypt unless DEMO_PASSWORD_HASH_METHOD names another (the test suite's cheap
        # one, as Django's docs advise for tests: scrypt was most of each test's set-up).
        method = current_app.config["DEMO_PASSWORD_HASH_METHOD"]
        self.password_hash = generate_password_hash(password, method=method)

    def check_password(self, password: str) -> bool:
        return bool(self.password_hash) and check_password_hash(self.password_hash, password)


class Group(db.Model):
    """A set of accounts and the page permissions they hold everywhere."""

    __tablename__ = "demo_groups"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(sa.String(255), unique=True)
    #: A list of :data:`PERMISSIONS`.
    permissions: Mapped[list[str]] = mapped_column(sa.JSON, default=list)

    members: Mapped[list[User]] = relationship(secondary=user_groups, back_populates="groups")
    rules: Mapped[list[PageRule]] = relationship(
        back_populates="group", cascade="all, delete-orphan", order_by="PageRule.id"
    )


class PageRule(db.Model):
    """Adds (or with ``deny``, removes) permissions of a group under a path prefix."""

    __tablename__ = "demo_page_rules"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    group_id: Mapped[int] = mapped_column(
        sa.ForeignKey("demo_groups.id", ondelete="CASCADE"), index=True
    )
    path_prefix: Mapped[str] = mapped_column(sa.String(255))
    permissions: Mapped[list[str]] = mapped_column(sa.JSON, default=list)
    deny: Mapped[bool] = mapped_column(default=False)

    group: Mapped[Group] = relationship(back_populates="rules")


class ApprovalRule(db.Model):
    """Suggestions to pages under ``path_prefix`` are reviewed by the named groups."""

    __tablename__ = "demo_approval_rules"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    site_id: Mapped[int] = mapped_column(
        sa.ForeignKey("demo_sites.id", ondelete="CASCADE"), index=True
    )
    path_prefix: Mapped[str] = mapped_column(sa.String(255))
    enabled: Mapped[bool] = mapped_column(default=True)

    reviewer_groups: Mapped[list[Group]] = relationship(secondary=approval_reviewers)


class Page(db.Model):
    """A page, unique by path within its site."""

    __tablename__ = "demo_pages"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    site_id: Mapped[int] = mapped_column(sa.ForeignKey("demo_sites.id"))
    path: Mapped[str] = mapped_column(sa.String(255))
    locale: Mapped[str] = mapped_column(sa.String(16), default="en")
    title: Mapped[str] = mapped_column(sa.String(255))
    content: Mapped[str] = mapped_column(sa.Text, default="")
    tags: Mapped[list[str]] = mapped_column(sa.JSON, default=list)
    publish_state: Mapped[str] = mapped_column(sa.String(16), default="published")
    publish_start: Mapped[datetime | None] = mapped_column(UTCDateTime)
    publish_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    author_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("demo_users.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    site: Mapped[Site] = relationship()
    revisions: Mapped[list[Revision]] = relationship(
        back_populates="page", cascade="all, delete-orphan", order_by="Revision.id"
    )
    watches: Mapped[list[Watch]] = relationship(cascade="all, delete-orphan")
    comments: Mapped[list[Comment]] = relationship(
        back_populates="page", cascade="all, delete-orphan", order_by="Comment.id"
    )
    submissions: Mapped[list[Submission]] = relationship(
        back_populates="page", cascade="all, delete-orphan"
    )

    __table_args__ = (
        sa.UniqueConstraint("site_id", "path"),
        sa.CheckConstraint("publish_state IN ('published', 'unpublished')", name="publish_state"),
        # Never reuse a deleted page's id on SQLite: a delete event checks that its page
        # is gone, and entries link by page id.
        {"sqlite_autoincrement": True},
    )


class Revision(db.Model):
    """A saved version of a page: one row per save, the first one at creation."""

    __tablename__ = "demo_revisions"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    page_id: Mapped[int] = mapped_column(
        sa.ForeignKey("demo_pages.id", ondelete="CASCADE"), index=True
    )
    title: Mapped[str] = mapped_column(sa.String(255))
    content: Mapped[str] = mapped_column(sa.Text)
    author_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("demo_users.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    page: Mapped[Page] = relationship(back_populates="revisions")


class Watch(db.Model):
    """An account watching a page; the primary key is the (page, user) lookup index."""

    __tablename__ = "demo_watches"

    page_id: Mapped[int] = mapped_column(
        sa.ForeignKey("demo_pages.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        sa.ForeignKey("demo_users.id", ondelete="CASCADE"), primary_key=True
    )
    site_id: Mapped[int] = mapped_column(sa.ForeignKey("demo_sites.id", ondelete="CASCADE"))


class Comment(db.Model):
    """A comment on a page; ``parent_id`` makes it a reply. A guest's has no author."""

    __tablename__ = "demo_comments"
    # Never reuse a deleted comment's id on SQLite: entries keep comment ids to decide
    # whether an excerpt may still be shown.
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    page_id: Mapped[int] = mapped_column(
        sa.ForeignKey("demo_pages.id", ondelete="CASCADE"), index=True
    )
    author_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("demo_users.id", ondelete="SET NULL")
    )
    parent_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("demo_comments.id", ondelete="SET NULL")
    )
    body: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    page: Mapped[Page] = relationship(back_populates="comments")
    author: Mapped[User | None] = relationship()
    # Deleting a comment keeps its replies: the ORM sets their parent_id to NULL.
    replies: Mapped[list[Comment]] = relationship(back_populates="parent")

    @property
    def is_edited(self) -> bool:
        # The two defaults run microseconds apart on insert; an edit is a later save.
        return (self.updated_at - self.created_at).total_seconds() > 1
    parent: Mapped[Comment | None] = relationship(back_populates="replies", remote_side=[id])


class Submission(db.Model):
    """A suggested change to a page, awaiting review: one per author per page."""

    __tablename__ = "demo_submissions"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    page_id: Mapped[int] = mapped_column(sa.ForeignKey("demo_pages.id", ondelete="CASCADE"))
    author_id: Mapped[int] = mapped_column(sa.ForeignKey("demo_users.id", ondelete="CASCADE"))
    content: Mapped[str] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(sa.String(16), default="open")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    page: Mapped[Page] = relationship(back_populates="submissions")
    author: Mapped[User] = relationship()

    __table_args__ = (
        sa.UniqueConstraint("page_id", "author_id"),
        sa.CheckConstraint("status IN ('open', 'approved', 'rejected')", name="status"),
    )


class AuditLog(db.Model):
    """What was done, by whom; wikinotify writes here through ``Host.audit``."""

    __tablename__ = "demo_audit_log"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(sa.String(64))
    kind: Mapped[str] = mapped_column(sa.String(64))
    actor_id: Mapped[str | None] = mapped_column(sa.String(64))
    details: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
