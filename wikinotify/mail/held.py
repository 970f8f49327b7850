"""The connection a mail run holds from its start to its end (:class:`HeldConnection`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session


class HeldConnection:
    """One database connection for the whole run: each of its transactions (one a mail)
    begins on it. The session otherwise gives its connection back to the pool at each
    commit and takes one again at the next statement, which a pool that pings before
    handing one out (``pool_pre_ping``) pays with a round trip: one a mail.

    On PostgreSQL each of the run's commits returns without waiting for the WAL to
    reach the disk. A commit of the drain that a PostgreSQL crash loses can only have a
    mail sent again (a claim lost puts its rows back to pending, a ``sent`` mark lost
    leaves them to the lease): the at-least-once the drain already promises. Waiting for
    the disk was most of a mail's cost (bench/drain.py). The held connection is set so
    for the run (and reset before it goes back to the pool); a transaction on any other
    (a replacement for a connection the database dropped) with ``SET LOCAL``.

    On PostgreSQL, too, each statement on the held connection is a transaction of its
    own (autocommit): every write of the run is one statement (a claim, a mark, a
    failure recorded), and a transaction around each cost a round trip to begin it and
    one to commit it, twice what the statement cost. What the rollback of a mail's
    transaction did is done by the statements themselves: a failure is recorded only
    on the rows still due (:func:`.claim.mark`), and rows claimed for a mail that does not go
    are given back (:meth:`.drain.Drain._release`). The connection goes back to the pool as it
    came (SQLAlchemy resets an isolation level set on it).
    """

    def __init__(self, session: Session, postgresql: bool) -> None:
        self.session = session
        self.postgresql = postgresql
        #: The DBAPI connection whose commits do not wait for the disk, for the run.
        self._unwaited: Any = None
        bind = session.get_bind()
        # A session bound to a connection already (a test's) has nothing to hold.
        self.engine = bind if isinstance(bind, sa.Engine) else None
        if self.engine is not None:
            self.connection = self.engine.connect()
            if postgresql:
                self.connection.exec_driver_sql("SET synchronous_commit TO off")
                self.connection.commit()
                self.connection.execution_options(isolation_level="AUTOCOMMIT")
                self._unwaited = self.connection.connection.dbapi_connection
            sa.event.listen(session, "do_orm_execute", self._bind)
        if postgresql:
            sa.event.listen(session, "after_begin", self._after_begin)

    @property
    def autocommit(self) -> bool:
        """Whether each statement commits on its own: the run's own connection, still
        the one it set up (a replacement for a connection the database dropped is not)."""
        return (self._unwaited is not None and not self.connection.invalidated
                and self.connection.connection.dbapi_connection is self._unwaited)

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """The rows of ``sql`` (in the driver's parameter style), run on the held
        connection itself, where each statement commits on its own (:attr:`autocommit`):
        the session would route it to this very connection, through its events, for a
        fifth of a claim's CPU (350 µs against 270 on the benchmark's digests). Failures
        are SQLAlchemy's, as through the session. A transaction SQLAlchemy began on the
        connection for this statement alone is ended at once (the database had none:
        autocommit), so the connection still goes back to the pool with none open."""
        if not self.autocommit:
            raise RuntimeError("only where each statement commits on its own")
        connection = self.connection
        began = not connection.in_transaction()
        try:
            return list(connection.exec_driver_sql(sql, dict(params)).all())
        finally:
            if began and connection.in_transaction():
                connection.commit()

    def _after_begin(self, session: Session, transaction: Any, connection: Any) -> None:
        if self._unwaited is None or connection.connection.dbapi_connection is not (
                self._unwaited):
            connection.exec_driver_sql("SET LOCAL synchronous_commit TO off")

    def _bind(self, state: Any) -> None:
        # Only what the session would run on this engine: a host's tables may have a
        # bind of their own.
        arguments = state.bind_arguments
        if "bind" not in arguments and self.session.get_bind(
                mapper=arguments.get("mapper"), clause=arguments.get("clause")) is self.engine:
            arguments["bind"] = self.connection

    def close(self) -> None:
        if self.postgresql:
            sa.event.remove(self.session, "after_begin", self._after_begin)
        if self.engine is None:
            return
        sa.event.remove(self.session, "do_orm_execute", self._bind)
        connection = self.connection
        if self._unwaited is not None and not connection.invalidated:
            # Never back to the pool with the run's setting: reset, or closed for good.
            try:
                if connection.in_transaction():
                    raise sa.exc.InvalidRequestError("the run left a transaction open")
                connection.exec_driver_sql("RESET synchronous_commit")
                connection.commit()
            except sa.exc.SQLAlchemyError:
                connection.invalidate()
        connection.close()
