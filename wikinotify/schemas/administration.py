"""The schemas of Admin → Notifications: the status the page and the API show, and the
instance settings and site switches an administrator saves."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from .field_types import StrictBoolean

# -- Admin → Notifications (docs/rules.md#instance-settings, docs/rules.md#admin-notifications) ---

#: The inclusive range of each instance setting, by API name: the API, the form's
#: ``min``/``max`` and its error text all read it from here.
SETTING_RANGES: dict[str, tuple[int, int]] = {
    "retentionDays": (1, 3650),
    "emailDelaySeconds": (0, 86400),
    "mailBatchSize": (1, 1000),
}


def _setting_field(name: str) -> fields.Integer:
    low, high = SETTING_RANGES[name]
    # strict: "100", 100.0 and true are refused rather than read as 100 (or 1).
    return fields.Integer(required=True, strict=True, validate=validate.Range(low, high))


class AdminSiteSchema(Schema):
    """One site as the admin screen shows it: its switch (docs/rules.md#the-site-switch) and whether
    it is https."""

    id = fields.String(dump_only=True)
    title = fields.String(dump_only=True)
    enabled = fields.Boolean(dump_only=True)
    https = fields.Boolean(dump_only=True)


class OutboxStatusSchema(Schema):
    unprocessed = fields.Integer(dump_only=True)
    oldestAgeSeconds = fields.Integer(allow_none=True, dump_only=True)


class HourSchema(Schema):
    start = fields.DateTime(dump_only=True)
    sent = fields.Integer(dump_only=True)
    failed = fields.Integer(dump_only=True)


class EmailStatusSchema(Schema):
    """Over the last 24 hours, ``sent`` and ``failed`` count mails (a digest is one);
    ``notificationsEmailed``, the notifications the sent mails carried. ``pending`` and
    ``pendingDue`` count entries (rows) whose mail is not out yet, not mails."""

    sent = fields.Integer(dump_only=True)
    failed = fields.Integer(dump_only=True)
    notificationsEmailed = fields.Integer(dump_only=True)
    pending = fields.Integer(dump_only=True)
    pendingDue = fields.Integer(dump_only=True)
    hours = fields.List(fields.Nested(HourSchema), dump_only=True)


class FailureSchema(Schema):
    """One row of a failed mail. ``POST /api/admin/mails/<id>/retry`` sends its mail (all
    its rows) again."""

    id = fields.Integer(dump_only=True)
    category = fields.String(dump_only=True)
    userId = fields.String(dump_only=True)
    error = fields.String(allow_none=True, dump_only=True)
    errorClass = fields.String(allow_none=True, dump_only=True)
    at = fields.DateTime(dump_only=True)


class MailAlertSchema(Schema):
    """The relay refused the wiki's configuration (authentication, TLS, a refused sender):
    mail is paused, and this stays until a send succeeds."""

    errorClass = fields.String(dump_only=True)
    error = fields.String(dump_only=True)
    at = fields.DateTime(dump_only=True)


class FailedEventSchema(Schema):
    """A dead letter: an event whose fan-out failed on every attempt. ``POST
    /api/admin/events/<id>/retry`` makes it claimable again."""

    id = fields.Integer(dump_only=True)
    kind = fields.String(dump_only=True)
    pageId = fields.String(allow_none=True, dump_only=True)
    pageTitle = fields.String(allow_none=True, dump_only=True)
    pagePath = fields.String(allow_none=True, dump_only=True)
    attempts = fields.Integer(dump_only=True)
    error = fields.String(allow_none=True, dump_only=True)
    at = fields.DateTime(dump_only=True)


class FailedDeliverySchema(Schema):
    """A webhook or chat delivery given up on. ``POST /api/admin/deliveries/<id>/retry``
    makes it due again. ``ownerId`` is null for a site-wide webhook's."""

    id = fields.Integer(dump_only=True)
    endpointId = fields.Integer(dump_only=True)
    channel = fields.String(dump_only=True)
    ownerId = fields.String(allow_none=True, dump_only=True)
    type = fields.String(dump_only=True)
    attempts = fields.Integer(dump_only=True)
    errorClass = fields.String(allow_none=True, dump_only=True)
    error = fields.String(allow_none=True, dump_only=True)
    at = fields.DateTime(dump_only=True)


class VitalsSchema(Schema):
    """wikinotify's vital signs (:class:`wikinotify.vitals.Vitals`), as the admin status and
    ``flask wikinotify status --json`` show them (docs/operating.md#the-status-command).
    Counts of what waits now stop at the status's ``countCap``; ages are in seconds; the
    Redis figures are meaningless while ``redisReachable`` is false."""

    eventsWaiting = fields.Integer(attribute="events_waiting", dump_only=True)
    oldestWaitingAgeSeconds = fields.Float(attribute="oldest_waiting_age", allow_none=True,
                                           dump_only=True)
    deadLetters = fields.Integer(attribute="dead_letters", dump_only=True)
    mailEntriesPending = fields.Integer(attribute="mail_entries_pending", dump_only=True)
    mailEntriesDue = fields.Integer(attribute="mail_entries_due", dump_only=True)
    mailFailed24h = fields.Integer(attribute="mail_failed_24h", dump_only=True)
    deliveriesWaiting = fields.Integer(attribute="deliveries_waiting", dump_only=True)
    deliveriesFailed24h = fields.Integer(attribute="deliveries_failed_24h", dump_only=True)
    queueLengths = fields.Dict(keys=fields.String(), values=fields.Integer(),
                               attribute="queue_lengths", dump_only=True)
    workers = fields.Integer(dump_only=True)
    starvedQueues = fields.List(fields.String(), attribute="starved_queues", dump_only=True)
    cronLastSeenAgeSeconds = fields.Float(attribute="cron_last_seen_age", allow_none=True,
                                          dump_only=True)
    redisReachable = fields.Boolean(attribute="redis_reachable", dump_only=True)
    backlogWarningSeconds = fields.Float(attribute="backlog_warning", dump_only=True)


class AdminStatusSchema(Schema):
    """The read-only half of ``GET /api/admin/settings`` (docs/rules.md#admin-notifications)."""

    mailConfigured = fields.Boolean(dump_only=True)
    #: Why mail cannot be sent and what to do, in English; None while it can.
    mailProblem = fields.String(allow_none=True, dump_only=True)
    #: Where the wiki configures mail (``WIKINOTIFY_MAIL_SETTINGS_URL``); None: not given.
    mailSettingsUrl = fields.String(allow_none=True, dump_only=True)
    mailAlert = fields.Nested(MailAlertSchema, allow_none=True, dump_only=True)
    countCap = fields.Integer(dump_only=True)
    vitals = fields.Nested(VitalsSchema, dump_only=True)
    #: What needs an operator, each a sentence saying what to do; empty when all is well.
    warnings = fields.List(fields.String(), dump_only=True)
    outbox = fields.Nested(OutboxStatusSchema, dump_only=True)
    email = fields.Nested(EmailStatusSchema, dump_only=True)
    failures = fields.List(fields.Nested(FailureSchema), dump_only=True)
    failedEvents = fields.List(fields.Nested(FailedEventSchema), dump_only=True)
    failedDeliveries = fields.List(fields.Nested(FailedDeliverySchema), dump_only=True)
    plainHttpSites = fields.List(fields.Nested(AdminSiteSchema), dump_only=True)


class AdminSettingsSchema(Schema):
    """``GET`` (with ``status``) and ``PUT /api/admin/settings`` answers. Declared fields
    only: the unsubscribe secret has none, so it cannot be dumped by mistake."""

    retentionDays = fields.Integer(dump_only=True)
    emailDelaySeconds = fields.Integer(dump_only=True)
    mailBatchSize = fields.Integer(dump_only=True)
    sites = fields.List(fields.Nested(AdminSiteSchema), dump_only=True)
    status = fields.Nested(AdminStatusSchema, dump_only=True)


class AdminSiteUpdateSchema(Schema):
    class Meta:
        unknown = RAISE

    id = fields.String(required=True)
    enabled = StrictBoolean(required=True)


class SiteSwitchList(fields.List[dict[str, Any]]):
    """``[{"id", "enabled"}, ...]`` naming only the wiki's sites, each at most once: a
    wrong id is named as ``sites.<index>.id``."""

    def __init__(self, site_ids: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(fields.Nested(AdminSiteUpdateSchema), **kwargs)
        self.site_ids = frozenset(site_ids)

    def _deserialize(
        self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any
    ) -> list[dict[str, Any] | None]:
        sites = super()._deserialize(value, attr, data, **kwargs)
        errors: dict[int, dict[str, list[str]]] = {}
        seen: set[str] = set()
        for index, site in enumerate(sites):
            # Never None: the nested schema refuses a null item ("Field may not be null.").
            assert site is not None
            if site["id"] not in self.site_ids:
                errors[index] = {"id": ["No site has this id."]}
            elif site["id"] in seen:
                # Listed twice (maybe on and off): which one was meant is anyone's guess.
                errors[index] = {"id": ["This site is listed more than once."]}
            seen.add(site["id"])
        if errors:
            raise ValidationError(errors)
        return sites


@cache
def admin_settings_update_schema(site_ids: tuple[str, ...]) -> Schema:
    """The ``PUT /api/admin/settings`` body for a wiki with exactly these sites: the three
    settings, required, and ``sites`` to switch (optional; a site not listed keeps its
    switch). Nothing unknown: marshmallow's default is RAISE."""
    return Schema.from_dict(
        {
            **{name: _setting_field(name) for name in SETTING_RANGES},
            "sites": SiteSwitchList(site_ids, load_default=list),
        },
        name="AdminSettingsUpdate",
    )()
