"""Marshmallow schemas for every JSON body in and out of the API and the webhooks: one per
resource, dumping the objects the code holds (an endpoint row, an entry as presented),
attributes named as in Python and ``data_key`` giving the camelCase the JSON carries."""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import cache
from typing import Any, cast

from flask_babel import gettext
from marshmallow import RAISE, Schema, ValidationError, fields, validate

from ..models import Cadence, DeliveryState, EndpointState, MuteKind
from ..outbound.endpoints import scope_of
from .field_types import Shown, StrictBoolean, TimeZoneName


class ChannelsSchema(Schema):
    """One category's channels. ``webhook``, ``chat`` and ``push`` are shown where the
    reader set one up (for push, a browser subscribed); left out of a save, they stay as
    they are.

    Its keys are channel names (``inApp`` is what the ``channel`` column stores and what
    :func:`wikinotify.preferences.save` reads), not attributes: no ``data_key`` here."""

    class Meta:
        unknown = RAISE

    inApp = StrictBoolean(required=True)
    email = StrictBoolean(required=True)
    webhook = StrictBoolean()
    chat = StrictBoolean()
    push = StrictBoolean()


class CategoryPreferenceSchema(Schema):
    """One row of the grid: dumps a :class:`wikinotify.preferences.grid.ShownChoice`. A channel
    the grid has no column for is left out (its key is not in ``effective``)."""

    key = fields.String(attribute="category.key", dump_only=True)
    section = fields.String(attribute="category.section", dump_only=True)
    title = Shown(gettext, attribute="category.title", dump_only=True)
    description = Shown(gettext, attribute="category.description", dump_only=True)
    opt_in = fields.Boolean(attribute="category.opt_in", data_key="optIn", dump_only=True)
    in_app = fields.Boolean(attribute="effective.inApp", data_key="inApp", dump_only=True)
    email = fields.Boolean(attribute="effective.email", dump_only=True)
    #: Only where the reader has a webhook endpoint (a chat target) set up.
    webhook = fields.Boolean(attribute="effective.webhook", dump_only=True)
    chat = fields.Boolean(attribute="effective.chat", dump_only=True)
    #: Only where a browser of the reader's is subscribed to push.
    push = fields.Boolean(attribute="effective.push", dump_only=True)
    defaults = fields.Nested(ChannelsSchema, dump_only=True)


class EmailScheduleSchema(Schema):
    """``emailSchedule`` (docs/rules.md#digests): ``hour`` is read for daily and weekly digests,
    ``weekday`` (0 = Monday) for weekly ones; ``timezone`` null follows the account's, then the
    site's, then UTC. What is left out takes its default."""

    class Meta:
        unknown = RAISE

    cadence = fields.String(required=True, validate=validate.OneOf(tuple(Cadence)))
    hour = fields.Integer(strict=True, validate=validate.Range(0, 23))
    weekday = fields.Integer(strict=True, validate=validate.Range(0, 6))
    timezone = TimeZoneName(allow_none=True)


class PreferencesSchema(Schema):
    """``GET /api/preferences``: dumps a :class:`wikinotify.preferences.Overview`."""

    #: The grid's columns: ``inApp``, ``email``, then ``webhook``, ``chat`` and ``push``
    #: where the reader set one up.
    channels = fields.List(fields.String(), dump_only=True)
    email_available = fields.Boolean(data_key="emailAvailable", dump_only=True)
    site_enabled = fields.Boolean(data_key="siteEnabled", dump_only=True)
    email_schedule = fields.Nested(EmailScheduleSchema, attribute="shown_schedule",
                                   data_key="emailSchedule", dump_only=True)
    categories = fields.List(fields.Nested(CategoryPreferenceSchema), attribute="rows",
                             dump_only=True)


@cache
def preferences_update_schema(keys: tuple[str, ...]) -> Schema:
    """The ``PUT /api/preferences`` body for exactly these category keys: the full map,
    every category required, nothing unknown."""
    categories = Schema.from_dict(
        {key: fields.Nested(ChannelsSchema, required=True) for key in keys},
        name="CategoriesUpdate",
    )
    # Unknown keys (a category that does not exist or is not visible) are refused:
    # marshmallow's default is RAISE.
    return Schema.from_dict(
        {
            "categories": fields.Nested(categories, required=True),
            # Left out: the schedule stays as it is.
            "email_schedule": fields.Nested(EmailScheduleSchema, data_key="emailSchedule",
                                            load_default=None),
        },
        name="PreferencesUpdate",
    )()


class ErrorDetailSchema(Schema):
    code = fields.String()
    message = fields.String()
    fields_ = fields.Dict(
        data_key="fields", keys=fields.String(), values=fields.List(fields.String())
    )


class ErrorSchema(Schema):
    """Every error: ``{"error": {"code", "message", "fields"?}}``."""

    error = fields.Nested(ErrorDetailSchema)


def flatten_messages(messages: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"categories": {"mention": {"email": [...]}}}`` → ``{"categories.mention.email":
    [...]}``: the field named in full, as a client needs it."""
    if isinstance(messages, list):
        return {prefix or "_schema": [str(m) for m in messages]}
    flat: dict[str, list[str]] = {}
    for key, value in messages.items():
        # A nested object refused whole ("emailSchedule": "hourly") is named as itself.
        name = prefix if key == "_schema" and prefix else f"{prefix}.{key}" if prefix else str(key)
        flat.update(flatten_messages(value, name))
    return flat


def load(schema: Schema, data: Any) -> dict[str, Any]:
    """Validate ``data``; a ``ValidationError`` carries the flattened field messages."""
    if not isinstance(data, dict):
        raise ValidationError({"_schema": ["The body must be a JSON object."]})
    # marshmallow's load() is unannotated; one object in (many=False) is one dict out.
    return cast(dict[str, Any], schema.load(data))


def dump(schema: Schema, obj: Any) -> dict[str, Any]:
    """``obj`` as the JSON object ``schema`` describes."""
    # marshmallow's dump() is unannotated; one object in (many=False) is one dict out.
    return cast(dict[str, Any], schema.dump(obj))



@cache
def _attribute_path(attr: str) -> Callable[[Any], Any]:
    return operator.attrgetter(attr)


class ActorSchema(Schema):
    id = fields.String()
    name = fields.String(allow_none=True)
    #: The bell menu's circle for an actor without a picture: "BB" for "Bob Builder".
    initials = fields.String(allow_none=True, dump_only=True)
    #: The actor's picture (``Host.avatar_urls``), an ``http(s)`` URL; null without one.
    avatar_url = fields.String(data_key="avatarUrl", allow_none=True, dump_only=True)


class PageRefSchema(Schema):
    id = fields.String()
    title = fields.String(allow_none=True)
    path = fields.String(allow_none=True)


class NotificationSchema(Schema):
    """One inbox entry as its reader is shown it (``GET /api/notifications``, and the
    ``data`` of a webhook): dumps a :class:`wikinotify.inbox.presentation.Presented`."""

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        """``attr`` read as an attribute path: a presented entry and its row are objects.
        marshmallow's own reading tries ``obj[attr]`` first, and the row (a SQLAlchemy
        ``Row``, a tuple) refuses a name with an exception: 3 µs a field, 0.7 ms a page
        of thirty entries."""
        try:
            return _attribute_path(attr)(obj)
        except AttributeError:
            return default

    id = fields.Integer(attribute="entry.id", dump_only=True)
    category = fields.String(attribute="entry.category", dump_only=True)
    variant = fields.String(attribute="entry.variant", dump_only=True)
    variants = fields.List(fields.String(), dump_only=True)
    count = fields.Integer(attribute="entry.count", dump_only=True)
    text = fields.String(dump_only=True)
    read_at = fields.DateTime(attribute="entry.read_at", data_key="readAt", allow_none=True,
                              dump_only=True)
    created_at = fields.DateTime(attribute="entry.created_at", data_key="createdAt",
                                 dump_only=True)
    updated_at = fields.DateTime(attribute="entry.updated_at", data_key="updatedAt",
                                 dump_only=True)
    actor = fields.Nested(ActorSchema, allow_none=True, dump_only=True)
    page = fields.Nested(PageRefSchema, allow_none=True, dump_only=True)
    #: ``None``, like the page's path, when the reader can no longer see the page.
    url = fields.String(allow_none=True, dump_only=True)
    excerpt = fields.String(allow_none=True, dump_only=True)
    #: The entry's own plain text (an announcement's body); ``None`` for most.
    body = fields.String(allow_none=True, dump_only=True)
    available = fields.Boolean(dump_only=True)


class TimeShownSchema(Schema):
    """A time as its reader is shown it (docs/rules.md#whose-time): ``text`` ("3 min
    ago", or the date and time), ``exact`` (to the second, the zone named)."""

    text = fields.String(dump_only=True)
    exact = fields.String(dump_only=True)


class ListedNotificationSchema(NotificationSchema):
    """An entry in the caller's list: also ``when`` it was last updated, in her zone and
    language, as the bell menu shows it."""

    when = fields.Nested(TimeShownSchema, attribute="shown_at", dump_only=True)
    #: Shown first until read (an unread announcement, docs/rules.md#announcements): the
    #: first page of the list begins with these, and no later page repeats them.
    pinned = fields.Boolean(dump_only=True)


class NotificationPageSchema(Schema):
    items = fields.List(fields.Nested(ListedNotificationSchema), dump_only=True)
    next_cursor = fields.String(data_key="nextCursor", allow_none=True, dump_only=True)


class ListQuerySchema(Schema):
    """``?cursor=&category=&pageId=&unread=`` of ``GET /api/notifications``; the category
    is checked against the registry by :func:`list_query_schema`."""

    class Meta:
        unknown = RAISE

    cursor = fields.String(load_default=None)
    category = fields.String(load_default=None)
    page_id = fields.String(data_key="pageId", load_default=None,
                            validate=validate.Length(max=64))
    unread = fields.Boolean(load_default=False)


@cache
def list_query_schema(keys: tuple[str, ...]) -> Schema:
    """:class:`ListQuerySchema` whose ``category`` is one of exactly these keys."""
    return ListQuerySchema.from_dict(
        {"category": fields.String(load_default=None, validate=validate.OneOf(keys))},
        name="ListQuery",
    )()


def count_label(count: int) -> str:
    """A count as the badge shows it: ``99+`` past 99."""
    return "99+" if count > 99 else str(count)


class SummarySchema(Schema):
    """The badge: dumps a :class:`wikinotify.inbox.Summary` and the site's switch."""

    unread = fields.Integer(dump_only=True)
    unread_label = Shown(count_label, attribute="unread", data_key="unreadLabel", dump_only=True)
    #: Unread entries new since the user last opened the menu or the inbox: the badge.
    unseen = fields.Integer(dump_only=True)
    unseen_label = Shown(count_label, attribute="unseen", data_key="unseenLabel", dump_only=True)
    latest_at = fields.DateTime(data_key="latestAt", allow_none=True, dump_only=True)
    enabled = fields.Boolean(dump_only=True)


class MarkReadSchema(Schema):
    """``PUT /api/notifications/read``: everything, or one page's entries."""

    class Meta:
        unknown = RAISE

    page_id = fields.String(data_key="pageId", load_default=None)


class MuteRequestSchema(Schema):
    """``PUT /api/mutes``: what to mute."""

    class Meta:
        unknown = RAISE

    kind = fields.String(required=True, validate=validate.OneOf(tuple(MuteKind)))
    id = fields.String(required=True, validate=validate.Length(min=1, max=64))


class MuteSchema(Schema):
    kind = fields.String(dump_only=True, metadata={"enum": list(MuteKind)})
    id = fields.String(dump_only=True)
    #: The page's title or the person's name; null where the reader may no longer see it.
    name = fields.String(dump_only=True, allow_none=True)
    created_at = fields.DateTime(data_key="createdAt", dump_only=True)


class MutesSchema(Schema):
    """``GET /api/mutes``: the caller's mutes, newest first."""

    items = fields.List(fields.Nested(MuteSchema), dump_only=True)


class MarkedSchema(Schema):
    """The answer of ``PUT /api/notifications/read``: how many entries were marked, and
    the token that marks them unread again."""

    marked = fields.Integer(dump_only=True)
    undo_token = fields.String(data_key="undoToken", dump_only=True)


class DismissedSchema(Schema):
    """The answer of ``DELETE /api/notifications/<id>``: the token that puts it back."""

    undo_token = fields.String(data_key="undoToken", dump_only=True)


class UndoSchema(Schema):
    """``POST /api/notifications/undo``: an ``undoToken`` a dismissal or a "mark all read"
    answered (docs/rules.md#undo)."""

    class Meta:
        unknown = RAISE

    token = fields.String(required=True, validate=validate.Length(min=1, max=20_000))


class UndoneSchema(Schema):
    """The answer of ``POST /api/notifications/undo``: how many entries came back (0 when
    they were back already)."""

    restored = fields.Integer(dump_only=True)


# -- Webhooks and chat (docs/channels.md#webhooks) -----------------------------------------

#: Who an endpoint belongs to: the caller (``user``) or the whole site (``site``,
#: administrators only).
ENDPOINT_SCOPES = ("user", "site")


class WebhookSchema(Schema):
    """A webhook endpoint (an :class:`~wikinotify.models.Endpoint`) as its owner sees it.
    Never the secret (see :class:`WebhookSecretSchema`, the answers that make one)."""

    id = fields.Integer(dump_only=True)
    scope = fields.Function(scope_of, dump_only=True,
                            metadata={"type": "string", "enum": list(ENDPOINT_SCOPES)})
    #: A site-wide endpoint's site (null: every site); null for a user's own.
    site_id = fields.String(data_key="siteId", allow_none=True, dump_only=True)
    url = fields.String(dump_only=True)
    description = fields.String(dump_only=True)
    categories = fields.List(fields.String(), dump_only=True)
    state = fields.String(dump_only=True, metadata={"enum": list(EndpointState)})
    disabled_reason = fields.String(data_key="disabledReason", allow_none=True, dump_only=True)
    verified_at = fields.DateTime(data_key="verifiedAt", allow_none=True, dump_only=True)
    #: Until when the secret before the last rotation still signs beside the new one.
    previous_secret_until = fields.DateTime(data_key="previousSecretUntil", allow_none=True,
                                            dump_only=True)
    created_at = fields.DateTime(data_key="createdAt", dump_only=True)


class WebhookSecretSchema(WebhookSchema):
    """The answer of a creation or a rotation: the endpoint and its signing secret,
    shown this once (dumps :class:`ShownSecret`)."""

    secret = fields.String(dump_only=True)


class WebhooksSchema(Schema):
    items = fields.List(fields.Nested(WebhookSchema), dump_only=True)


class WebhooksQuerySchema(Schema):
    """``?scope=`` of ``GET /api/webhooks``."""

    class Meta:
        unknown = RAISE

    scope = fields.String(load_default="user", validate=validate.OneOf(ENDPOINT_SCOPES))


def _categories_field(keys: tuple[str, ...] | None, **kwargs: Any) -> fields.List[Any]:
    """A list of category keys; with ``keys``, the document lists them."""
    item = fields.String(validate=validate.Length(1, 64),
                         metadata={"enum": list(keys)} if keys else {})
    return fields.List(item, validate=validate.Length(1, 100), **kwargs)


def _url_field(**kwargs: Any) -> fields.String:
    return fields.String(validate=validate.Length(1, 2000), **kwargs)


def _description_field(**kwargs: Any) -> fields.String:
    return fields.String(validate=validate.Length(0, 255), **kwargs)


@cache
def webhook_create_schema(keys: tuple[str, ...] | None = None) -> Schema:
    """``POST /api/webhooks``: ``url`` and ``categories`` required."""
    return Schema.from_dict({
        "url": _url_field(required=True),
        "categories": _categories_field(keys, required=True),
        "description": _description_field(load_default=""),
        "scope": fields.String(load_default="user", validate=validate.OneOf(ENDPOINT_SCOPES)),
        #: A site-wide endpoint's site; left out or null, every site.
        "site_id": fields.String(data_key="siteId", load_default=None, allow_none=True,
                                 validate=validate.Length(1, 64)),
    }, name="WebhookCreate")()


@cache
def webhook_update_schema(keys: tuple[str, ...] | None = None) -> Schema:
    """``PATCH /api/webhooks/<id>``: what is left out stays as it is."""
    return Schema.from_dict({
        "url": _url_field(),
        "categories": _categories_field(keys),
        "description": _description_field(),
        "enabled": StrictBoolean(),
    }, name="WebhookUpdate")()


@cache
def chat_create_schema(keys: tuple[str, ...] | None = None) -> Schema:
    """``POST /api/chat``: the Apprise URL; ``categories`` left out, every category the
    caller may see (her preferences' chat column then chooses)."""
    return Schema.from_dict({
        "url": _url_field(required=True),
        "categories": _categories_field(keys, load_default=None),
        "description": _description_field(load_default=""),
    }, name="ChatCreate")()


class DeliverySchema(Schema):
    """One delivery (a :class:`~wikinotify.models.Delivery`) to an endpoint: its state
    and its last attempt's result."""

    id = fields.Integer(dump_only=True)
    #: The ``webhook-id`` header, the same on every retry.
    message_id = fields.String(data_key="messageId", dump_only=True)
    type = fields.String(dump_only=True)
    state = fields.String(dump_only=True, metadata={"enum": list(DeliveryState)})
    attempts = fields.Integer(dump_only=True)
    response_code = fields.Integer(data_key="responseCode", allow_none=True, dump_only=True)
    latency_ms = fields.Integer(data_key="latencyMs", allow_none=True, dump_only=True)
    error_class = fields.String(data_key="errorClass", allow_none=True, dump_only=True)
    error = fields.String(allow_none=True, dump_only=True)
    next_attempt_at = fields.DateTime(data_key="nextAttemptAt", allow_none=True,
                                      dump_only=True)
    created_at = fields.DateTime(data_key="createdAt", dump_only=True)
    delivered_at = fields.DateTime(data_key="deliveredAt", allow_none=True, dump_only=True)


class DeliveryPageSchema(Schema):
    """Dumps a :class:`wikinotify.outbound.endpoints.DeliveryPage`."""

    items = fields.List(fields.Nested(DeliverySchema), dump_only=True)
    next_cursor = fields.String(data_key="nextCursor", allow_none=True, dump_only=True)


class DeliveriesQuerySchema(Schema):
    """``?cursor=`` of ``GET /api/webhooks/<id>/deliveries``."""

    class Meta:
        unknown = RAISE

    cursor = fields.String(load_default=None)


class ChatTargetSchema(Schema):
    """A chat target (an :class:`~wikinotify.models.Endpoint`) as its owner sees it:
    never the Apprise URL, only its masked form."""

    id = fields.Integer(dump_only=True)
    target = fields.String(attribute="target_hint", dump_only=True)
    description = fields.String(dump_only=True)
    categories = fields.List(fields.String(), dump_only=True)
    state = fields.String(dump_only=True, metadata={"enum": [
        EndpointState.ACTIVE, EndpointState.DISABLED]})
    disabled_reason = fields.String(data_key="disabledReason", allow_none=True, dump_only=True)
    created_at = fields.DateTime(data_key="createdAt", dump_only=True)


class ChatTargetsSchema(Schema):
    items = fields.List(fields.Nested(ChatTargetSchema), dump_only=True)
