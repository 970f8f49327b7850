"""The schemas of announcements (docs/rules.md#announcements): what an administrator
sends to publish one, and how the list shows them."""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate, validates_schema

from ..announcements import BODY_LENGTH, GROUPS, TITLE_LENGTH
from .field_types import StrictBoolean

#: A title is one line: no control character (a newline, a NUL).
ONE_LINE = validate.Regexp(r"\A[^\x00-\x1f\x7f]*\Z", error="Must be one line of text.")
#: A body may hold newlines and tabs, but no other control character.
TEXT = validate.Regexp(r"\A[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*\Z",
                       error="Must be text without control characters.")


def _not_blank(value: str) -> None:
    if not value.strip():
        raise ValidationError("Must not be blank.")


class AudienceSchema(Schema):
    """``{"everyone": true}`` or ``{"groups": [ids]}``: one of the two."""

    class Meta:
        unknown = RAISE

    everyone = StrictBoolean()
    groups = fields.List(fields.String(validate=validate.Length(1, 64)),
                         validate=validate.Length(1, GROUPS))

    @validates_schema
    def _one_of(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("groups" in data) == bool(data.get("everyone")):
            raise ValidationError('Give either "everyone": true or "groups".', "everyone")


class AnnouncementCreateSchema(Schema):
    """``POST /api/admin/announcements``. Plain text: the body's web addresses become
    links when it is shown, and anything that looks like markup is shown as written."""

    class Meta:
        unknown = RAISE

    title = fields.String(required=True,
                          validate=[validate.Length(1, TITLE_LENGTH), _not_blank, ONE_LINE])
    body = fields.String(required=True,
                         validate=[validate.Length(1, BODY_LENGTH), _not_blank, TEXT])
    audience = fields.Nested(AudienceSchema, required=True)
    siteId = fields.String(validate=validate.Length(1, 64), data_key="siteId",
                           attribute="site_id")
    important = StrictBoolean(load_default=False)


class AnnouncementSchema(Schema):
    """One announcement as listed: dumps a :class:`wikinotify.announcements.Announcement`.
    ``state`` is ``waiting``, ``sending``, ``sent``, ``failed`` or ``withdrawn``."""

    id = fields.Integer(dump_only=True)
    title = fields.String(dump_only=True)
    body = fields.String(dump_only=True)
    important = fields.Boolean(dump_only=True)
    audience = fields.Dict(dump_only=True)
    siteId = fields.String(attribute="site_id", allow_none=True, dump_only=True)
    authorId = fields.String(attribute="author_id", allow_none=True, dump_only=True)
    createdAt = fields.DateTime(attribute="created_at", dump_only=True)
    withdrawnAt = fields.String(attribute="withdrawn_at", allow_none=True, dump_only=True)
    state = fields.String(dump_only=True)


class AnnouncementListSchema(Schema):
    items = fields.List(fields.Nested(AnnouncementSchema), dump_only=True)
