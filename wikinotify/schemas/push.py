"""The schemas of browser push (docs/channels.md#browser-push): the VAPID public key, and a
browser's subscription as ``PushSubscription.toJSON()`` gives it and as its reader sees it."""

from __future__ import annotations

from marshmallow import RAISE, Schema, fields, validate

#: base64url, with or without its padding (a browser's ``toJSON()`` leaves it out).
B64URL = validate.Regexp(r"^[A-Za-z0-9_-]+={0,2}$", error="Not base64url.")


class PushKeySchema(Schema):
    """``GET /api/push/key``."""

    #: The VAPID public key, the ``applicationServerKey`` a page subscribes with: an
    #: uncompressed P-256 point, base64url without padding.
    public_key = fields.String(data_key="publicKey", dump_only=True)


class PushKeysSchema(Schema):
    class Meta:
        unknown = RAISE

    p256dh = fields.String(required=True, validate=[validate.Length(1, 128), B64URL])
    auth = fields.String(required=True, validate=[validate.Length(1, 64), B64URL])


class PushSubscribeSchema(Schema):
    """``POST /api/push/subscriptions``: ``PushSubscription.toJSON()``; its
    ``expirationTime`` (null in every browser today) is taken and not kept."""

    class Meta:
        unknown = RAISE

    endpoint = fields.String(required=True, validate=validate.Length(1, 2000))
    keys = fields.Nested(PushKeysSchema, required=True)
    expiration_time = fields.Integer(data_key="expirationTime", allow_none=True,
                                     load_default=None, strict=True)


class PushSubscriptionSchema(Schema):
    """A subscription as its reader sees it: never its URL (the subscription's
    capability) nor its keys."""

    id = fields.Integer(dump_only=True)
    #: The browser it was subscribed from, read from its User-Agent ("Firefox on Linux").
    browser = fields.String(dump_only=True)
    #: The push service's host ("fcm.googleapis.com").
    service = fields.String(dump_only=True)
    #: SHA-256 (hex) of the subscription's URL: a page finds its own browser's in the
    #: list by hashing ``PushSubscription.endpoint``.
    endpoint_hash = fields.String(data_key="endpointHash", dump_only=True)
    created_at = fields.DateTime(data_key="createdAt", dump_only=True)
    last_used_at = fields.DateTime(data_key="lastUsedAt", allow_none=True, dump_only=True)


class PushSubscriptionsSchema(Schema):
    items = fields.List(fields.Nested(PushSubscriptionSchema), dump_only=True)
