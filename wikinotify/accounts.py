"""What wikinotify keeps about an account, and forgetting it (docs/rules.md#corner-cases: a user
deleted with entries pending takes them along). The wiki's tables are not referenced by foreign key,
so the wiki calls :meth:`WikiNotify.forget_user` where it deletes an account."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Flask
from sqlalchemy.orm import InstrumentedAttribute, Session

from . import commits
from .inbox import live
from .models import OWNED_BY_USER

#: After the commit that forgot accounts: their badges' versions, kept summaries and
#: trust go (:func:`wikinotify.inbox.live.trusted_summary` answers none of them again).
_FORGOTTEN = "wikinotify.accounts.forgotten"


def forget_user(session: Session, user_id: str) -> None:
    """Delete every row :data:`~wikinotify.models.OWNED_BY_USER` names as hers, children
    first: her entries (and the mail they were waiting for), preferences, schedule, seen
    time, mutes, endpoints and their deliveries. In the caller's transaction: no commit;
    once it commits, her summary's version and the trust her sessions' polls had go."""
    for column in OWNED_BY_USER:
        session.execute(sa.delete(column.class_).where(_hers(column, user_id)))
    commits.after_commit(session, _FORGOTTEN, [user_id])


def _forgotten(app: Flask, user_ids: set[str]) -> None:
    live.changed(app, sorted(user_ids))
    for user_id in user_ids:
        live.forget_account(app, user_id)


commits.work(_FORGOTTEN, _forgotten)


def _hers(column: InstrumentedAttribute[Any], user_id: str) -> sa.ColumnElement[bool]:
    """``column`` names the account, or (a foreign key) one of her rows of its table.
    Said here rather than left to ``ON DELETE CASCADE``, which SQLite applies only with
    its foreign keys switched on."""
    keys = column.expression.foreign_keys
    if not keys:
        return column == user_id
    (key,) = keys
    parent = next(c for c in OWNED_BY_USER if c.class_.__table__ is key.column.table)
    return column.in_(sa.select(key.column).where(_hers(parent, user_id)))
