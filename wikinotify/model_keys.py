"""The key columns :class:`~wikinotify.model_host.ModelHost` reads (accounts, pages, the
watch table's two), and how an id string, as ids cross the host interface, becomes a
key's value: in the column's own type, or nothing when the column cannot hold it, so a
stray id never costs a failed statement (which aborts a PostgreSQL transaction)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from . import dialects
from .config import ConfigError

#: An integer id as ``str(int)`` writes it: the one spelling of each id.
_CANONICAL_INTEGER = re.compile(r"0|-?[1-9][0-9]*")
#: The bits of each integer key type on PostgreSQL (``BigInteger`` and ``SmallInteger``
#: are ``Integer``s too, so they come first).
_INTEGER_BITS = ((sa.BigInteger, 64), (sa.SmallInteger, 16), (sa.Integer, 32))


class Key:
    """A key column (of the accounts, the pages, or the watch table's two), and how an id
    string becomes its value. Its kind is read once, at start-up, so a type it cannot read
    stops the app there rather than fail every lookup."""

    def __init__(self, column: sa.ColumnElement[Any]) -> None:
        self.column = column
        self.type = _key_type(column)
        if isinstance(self.type, sa.Uuid):
            self.kind = "uuid"
        elif isinstance(self.type, sa.Integer):
            self.kind = "integer"
        elif isinstance(self.type, sa.String) and not isinstance(self.type, sa.Enum):
            self.kind = "string"
        else:
            raise ConfigError(
                f"ModelHost: the key {column} is a {type(self.type).__name__}; ModelHost "
                "reads integer, string and UUID (sa.Uuid) keys: give the column one of "
                "those types, or subclass ModelHost and override its lookups")

    def value(self, text: str, dialect: str) -> Any | None:
        """The key ``text`` names, in the column's own type; ``None`` if it names none:
        one the column cannot hold, or another spelling of an id (ids alias no other)."""
        if self.kind == "uuid":
            try:
                found = uuid.UUID(text)
            except ValueError:
                return None
            if str(found) != text:  # not "{…}", "urn:uuid:…", capitals or bare hex
                return None
            return found if self.type.as_uuid else text
        if self.kind == "integer":
            if not _CANONICAL_INTEGER.fullmatch(text):  # not "07", "-0", "--5", "+5"
                return None
            number, bits = int(text), self._bits(dialect)
            # Out of the column's range the database would refuse the statement.
            return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None
        return None if "\x00" in text else text  # PostgreSQL's text holds no NUL

    def values(self, texts: Sequence[str], dialect: str) -> list[Any]:
        return [v for v in (self.value(t, dialect) for t in texts) if v is not None]

    def among(self, session: Any, values: Sequence[Any]) -> sa.ColumnElement[bool]:
        """``key IN values`` for a fan-out's batch (5,000 ids), as :func:`dialects.among`
        sends it: integers as JSON numbers, cast on PostgreSQL to ``bigint`` (which no
        value :meth:`value` lets through overflows); a UUID as the database stores it;
        a string uncast, so a ``VARCHAR(n)`` never truncates an id to another one's."""
        dialect = str(session.get_bind().dialect.name)
        sql_type: sa.types.TypeEngine[Any] | None = None
        if self.kind == "uuid" and self._stored_as_hex(dialect):
            values = [uuid.UUID(str(v)).hex for v in values]
        elif self.kind == "uuid":
            values, sql_type = [str(v) for v in values], sa.Uuid()
        elif self.kind == "integer":
            sql_type = sa.BigInteger()
        return dialects.among(session, self.column, values, sql_type)

    def sql_text_is_str(self, dialect: str) -> bool:
        """Whether ``CAST(key AS TEXT)`` is the id string (a UUID stored as 32 hex
        digits has not the hyphens of ``str(uuid)``)."""
        return not (self.kind == "uuid" and self._stored_as_hex(dialect))

    def _stored_as_hex(self, dialect: str) -> bool:
        """A UUID is ``CHAR(32)`` but on PostgreSQL with ``native_uuid`` (the default)."""
        return dialect != "postgresql" or not self.type.native_uuid

    def _bits(self, dialect: str) -> int:
        if dialect != "postgresql":
            return 64  # SQLite's integers are all 64-bit
        return next(bits for kind, bits in _INTEGER_BITS if isinstance(self.type, kind))


def _key_type(column: sa.ColumnElement[Any]) -> Any:
    """A column's type; a foreign key declared without one takes its target's."""
    foreign = getattr(column, "foreign_keys", None)
    if isinstance(column.type, sa.types.NullType) and foreign:
        return next(iter(foreign)).column.type
    return column.type
