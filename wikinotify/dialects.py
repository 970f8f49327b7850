"""The one place that picks SQL by database: the two databases wikinotify supports."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def insert(session: Session, table):
    """``INSERT`` with ``ON CONFLICT`` support (PostgreSQL's or SQLite's)."""
    return (postgresql.insert if is_postgresql(session) else sqlite.insert)(table)
