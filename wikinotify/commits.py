"""Work that waits for the wiki's commit.

wikinotify writes inside the wiki's own transaction (``emit``, ``mark_seen``) and acts on
it only once that transaction has committed: the fan-out is kicked, open badges are told.
A rollback forgets it. Each kind of work is named, and gathers the ids it acts on across
the transaction, so that one commit does it once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, current_app
from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session

#: ``session.info`` key: the work waiting for this session's commit, by name.
_PENDING = "wikinotify.after_commit"

#: What each named piece of work does with the app and the ids it gathered.
_WORK: dict[str, Callable[[Flask, set[str]], None]] = {}


def work(name: str, action: Callable[[Flask, set[str]], None]) -> None:
    """Name what to do after a commit; modules call it once, at import."""
    _WORK[name] = action


def after_commit(session: Session, name: str, ids: Iterable[str] = ()) -> None:
    """Do the work ``name`` once ``session`` commits, for ``ids`` among others."""
    session.info.setdefault(_PENDING, {}).setdefault(name, set()).update(ids)


def _after_commit(session: Session) -> None:
    pending: dict[str, set[str]] = session.info.pop(_PENDING, {})
    if pending:
        # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        for name, ids in pending.items():
            _WORK[name](app, ids)


def _after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)


def listen(scoped_session: Any) -> None:
    """Do the waiting work after the wiki's session commits; forget it on rollback."""
    for name, listener in (("after_commit", _after_commit), ("after_rollback", _after_rollback)):
        if not sa_event.contains(scoped_session, name, listener):
            sa_event.listen(scoped_session, name, listener)
