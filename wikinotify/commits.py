"""Work that waits for the wiki's commit.

wikinotify writes inside the wiki's own transaction (``emit``, ``mark_seen``) and acts on
it only once that transaction has committed: the fan-out is kicked, open badges are told.
A rollback forgets it; a SAVEPOINT's rollback forgets only what was asked for inside
it. Each kind of work is named, and gathers the ids it acts on across
the transaction, so that one commit does it once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, current_app
from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session, SessionTransaction

#: ``session.info`` key: the work waiting for a commit, by the transaction it was asked for
#: in (the outermost one or a SAVEPOINT), then by name.
_PENDING = "wikinotify.after_commit"

#: What each named piece of work does with the app and the ids it gathered.
_WORK: dict[str, Callable[[Flask, set[str]], None]] = {}

Pending = dict[str, set[str]]


def work(name: str, action: Callable[[Flask, set[str]], None]) -> None:
    """Name what to do after a commit; modules call it once, at import."""
    _WORK[name] = action


def after_commit(session: Session, name: str, ids: Iterable[str] = ()) -> None:
    """Do the work ``name`` once ``session`` commits, for ``ids`` among others. Asked for
    inside a SAVEPOINT, it is forgotten if that SAVEPOINT is rolled back."""
    level = _level(session.get_nested_transaction() or session.get_transaction())
    _waiting(session).setdefault(level, {}).setdefault(name, set()).update(ids)


def _waiting(session: Session) -> dict[SessionTransaction | None, Pending]:
    waiting: dict[SessionTransaction | None, Pending] = session.info.setdefault(_PENDING, {})
    return waiting


def _level(transaction: SessionTransaction | None) -> SessionTransaction | None:
    """The SAVEPOINT or outermost transaction ``transaction`` belongs to: SQLAlchemy's
    inner "subtransactions" (a flush's) commit and roll back with it."""
    while transaction is not None and not transaction.nested and transaction.parent:
        transaction = transaction.parent
    return transaction


def _after_commit(session: Session) -> None:
    # SQLAlchemy calls this for a released SAVEPOINT too: its work then waits with the
    # transaction around it, for the real commit (or the rollback that forgets it).
    committed = session.get_nested_transaction() or session.get_transaction()
    waiting = _waiting(session)
    pending = waiting.pop(committed, {})
    if committed is not None and committed.nested:
        parent = waiting.setdefault(_level(committed.parent), {})
        for name, ids in pending.items():
            parent.setdefault(name, set()).update(ids)
        return
    # Work asked for before the transaction began (None) is this commit's too.
    for name, ids in waiting.pop(None, {}).items():
        pending.setdefault(name, set()).update(ids)
    if pending:
        # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        for name, ids in pending.items():
            _WORK[name](app, ids)


def _after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
    # A transaction ends after its commit has moved its work on: what is still here was
    # rolled back (a SAVEPOINT's alone, or the whole transaction), or closed unfinished.
    waiting = _waiting(session)
    waiting.pop(transaction, None)
    if transaction.parent is None:
        waiting.pop(None, None)


def listen(scoped_session: Any) -> None:
    """Do the waiting work after the wiki's session commits; forget it on rollback."""
    for name, listener in (("after_commit", _after_commit),
                           ("after_transaction_end", _after_transaction_end)):
        if not sa_event.contains(scoped_session, name, listener):
            sa_event.listen(scoped_session, name, listener)
