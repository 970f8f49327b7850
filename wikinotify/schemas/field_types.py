"""The field types wikinotify's schemas add to marshmallow's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marshmallow import fields

from ..preferences.cadence import known_timezones


class StrictBoolean(fields.Boolean):
    """``true`` or ``false`` and nothing else: ``1``, ``"yes"`` and ``"on"`` are errors,
    so a client bug cannot silently switch a channel."""

    default_error_messages = {"invalid": "Must be true or false."}

    def _deserialize(
        self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any
    ) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


class Shown(fields.String):
    """A string ``show`` makes of the attribute's value: a catalogue message id in the
    request's language (``gettext``), a count as the badge writes it (:func:`count_label`)."""

    def __init__(self, show: Callable[[Any], str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.show = show

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else self.show(value)


class TimeZoneName(fields.String):
    """An IANA time zone name zoneinfo knows (``Europe/Paris``)."""

    default_error_messages = {"unknown": "Not a known IANA time zone name."}

    def _deserialize(
        self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any
    ) -> str:
        name = super()._deserialize(value, attr, data, **kwargs)
        if name not in known_timezones():
            raise self.make_error("unknown")
        return name
