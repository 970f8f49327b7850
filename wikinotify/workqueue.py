"""Work kept in a table: rows a worker claims under a lease, tries, and tries again or gives
up on. One machine for every queue wikinotify keeps in its database: the fan-out's events
and ranges (:mod:`wikinotify.pipeline.claims`, :mod:`wikinotify.pipeline.failures`), the
mail drain's rows (:mod:`wikinotify.mail.claim`) and the webhook and chat deliveries
(:mod:`wikinotify.outbound.engine`).

**The claim** (:class:`Claim`) is one statement, on the database's clock: it moves the rows
it takes out of reach of every other worker (a state, a lease) and returns them. On
PostgreSQL it is ``UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED))``:
``SKIP LOCKED`` passes over the rows another worker is claiming, and ``ARRAY(…)`` evaluates
the subquery once. Written ``id IN (SELECT … LIMIT n …)``, PostgreSQL may plan a semi-join
that runs the subquery again for every row, and the LIMIT stops limiting: one worker claims
the whole queue (the claim query trap). SQLite has one writer at a time, so
the same UPDATE, conditional, is the whole claim. What a use picks first and which rows it
leaves for later (the deliveries' fair turns) are its own: they are parameters.

Every time in a claim is the database's: ``{now}``, and ``{now+:name}``, now plus the
seconds bound as ``:name`` (a lease's end; negative, the start of a lease that lapses now).
A worker whose clock is wrong neither takes a lease that has not lapsed nor keeps one that
has.

**The retry policy** (:class:`RetryPolicy`) is data, as rq's ``Retry`` is: how many attempts,
the wait after each failure, its jitter, and how much of an error's description is kept.

**The waiting probe** (:meth:`Claim.waiting`): whether anything is free to claim now, by the
claim's own condition, so that a job runs again at once rather than at the next minute.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from . import dialects

#: How the two databases say "equal, NULL equal to NULL", as ``{same}`` in a claim.
_SAME = {"postgresql": "IS NOT DISTINCT FROM", "sqlite": "IS"}


@dataclass(frozen=True)
class RetryPolicy:
    """How a unit of work is tried: ``attempts`` in all, then it is given up; after the
    n-th failure it waits ``waits[n - 1]`` (the last repeats), stretched or shrunk by up to
    ``jitter`` (a fraction) so that work that failed together does not all come back at
    the same second. An error's description is kept to ``error_length`` characters."""

    attempts: int
    waits: tuple[timedelta, ...]
    jitter: float = 0.0
    error_length: int = 1000

    def retry_in(
        self, attempts: int, rng: Callable[[], float] = random.random
    ) -> timedelta | None:
        """The wait after the ``attempts``-th failure; ``None`` when it was the last."""
        if attempts >= self.attempts:
            return None
        return self.wait(attempts, rng)

    def wait(self, attempts: int, rng: Callable[[], float] = random.random) -> timedelta:
        """The wait after the ``attempts``-th failure (from 1), with its jitter."""
        base = self.waits[min(attempts, len(self.waits)) - 1]
        if not self.jitter:
            return base
        return base * (1 + self.jitter * (2 * rng() - 1))

    def error(self, text: str | None) -> str | None:
        """What a row keeps of an error's description (nothing of an empty one)."""
        return text[: self.error_length] if text else None


@dataclass(frozen=True)
class Claim:
    """One queue's claim, as SQL. ``free`` says which rows of ``table`` are free to claim
    (due, or under a lease that lapsed): the waiting probe asks it too. ``narrow`` adds
    what this claim leaves for later or for other claims (its parameters); ``order_by`` and
    ``limit`` say which it takes first and how many (none: every free row). ``take`` is
    the ``SET`` of the claim, ``returning`` what it answers. ``alias`` names ``table`` in
    ``free``, ``narrow`` and ``join`` (a table the choice reads, not locked). The texts
    may hold ``{now}``, ``{now+:name}`` and ``{same}`` (see the module's docstring)."""

    table: str
    free: str
    take: str
    returning: str = "id"
    narrow: str = ""
    order_by: str = ""
    limit: str = ""
    alias: str = ""
    join: str = ""
    #: The columns the claim returns, typed, when it returns rows of the table.
    columns: Sequence[sa.ColumnClause[Any]] = ()
    #: Expanding bind parameters (``IN :name``), with their types.
    expanding: Sequence[tuple[str, sa.types.TypeEngine[Any]]] = ()
    _made: dict[tuple[str, str], sa.Executable] = field(
        default_factory=dict, compare=False, hash=False, repr=False)
    _texts: dict[tuple[str, str], str] = field(
        default_factory=dict, compare=False, hash=False, repr=False)

    def sql(self, session: Session, before: str = "") -> str:
        """The claim's text for ``session``'s database; ``before``, a statement (a ``WITH``) of the
        same transaction that goes first (PostgreSQL)."""
        row = f"{self.alias}." if self.alias else ""
        where = " AND ".join(f"({w})" for w in (self.free, self.narrow) if w)
        pick = f"SELECT {row}id FROM {self.table} {self.alias} {self.join}\n    WHERE {where}"
        if self.order_by:
            pick += f"\n    ORDER BY {self.order_by}"
        if self.limit:
            pick += f"\n    LIMIT {self.limit}"
        if dialects.is_postgresql(session):
            of = f" OF {self.alias}" if self.alias else ""
            chosen = f"id = ANY(ARRAY(\n    {pick}\n    FOR UPDATE{of} SKIP LOCKED))"
        else:
            chosen = f"id IN (\n    {pick})"
        text = (f"{before}UPDATE {self.table} SET {self.take}\nWHERE {chosen}\n"
                f"RETURNING {self.returning}")
        return _filled(text, session)

    def statement(self, session: Session, before: str = "") -> sa.Executable:
        """The claim as a statement for ``session``'s database, made once: building the
        text and its columns again for every claim cost a tenth of a mail's."""
        key = (session.get_bind().dialect.name, before)
        made = self._made.get(key)
        if made is None:
            text = sa.text(self.sql(session, before)).bindparams(
                *(sa.bindparam(name, type_=type_, expanding=True)
                  for name, type_ in self.expanding))
            made = self._made[key] = text.columns(*self.columns) if self.columns else text
        return made

    def driver_sql(self, session: Session, before: str = "") -> str:
        """The claim's text in the driver's own parameter style, compiled once, for a
        connection's ``exec_driver_sql``: the same statement as :meth:`statement`'s, its
        rows as the driver reads them (on PostgreSQL what :attr:`columns`' types would
        give: psycopg reads times with their zone and JSON as objects already)."""
        dialect = session.get_bind().dialect
        key = (dialect.name, before)
        text = self._texts.get(key)
        if text is None:
            if self.expanding:
                raise ValueError("a claim with expanding parameters goes through the session")
            text = self._texts[key] = str(sa.text(self.sql(session, before)).compile(
                dialect=dialect))
        return text

    def waiting(self, session: Session, **params: Any) -> bool:
        """Whether any row is free to claim now: free, and found through the claim's
        :attr:`join` as the claim finds it (a delivery whose endpoint is gone is no work,
        and a run asked for again because of it would be asked for again forever)."""
        query = f"SELECT 1 FROM {self.table} {self.alias} {self.join} WHERE {self.free} LIMIT 1"
        return session.scalar(sa.text(_filled(query, session)), params) is not None


#: ``{now+:name}`` in a claim's text.
_NOW_PLUS = re.compile(r"\{now\+:(\w+)\}")


def _filled(text: str, session: Session) -> str:
    same = _SAME[session.get_bind().dialect.name]
    text = _NOW_PLUS.sub(lambda m: dialects.now_plus_sql(session, m.group(1)), text)
    return text.replace("{now}", dialects.now_sql(session)).replace("{same}", same)
