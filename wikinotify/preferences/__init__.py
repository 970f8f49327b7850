"""What each reader wants: the grid of categories and channels, read and saved (``grid``,
re-exported here), the email schedule and when a mail is due (``cadence``), and the pages
and people she muted (``mutes``)."""

from __future__ import annotations

from .grid import (
    BASE_CHANNELS,
    CHANNEL_FIELDS,
    OUTBOUND_CHANNELS,
    CategoryChoice,
    Overview,
    channel_default,
    choices,
    effective_defaults,
    email_schedule,
    outbound_default,
    overview,
    reschedule_pending,
    save,
    save_schedule,
    schedules,
    stop_all_email,
    stored_rows,
)

__all__ = [
    "BASE_CHANNELS",
    "CHANNEL_FIELDS",
    "OUTBOUND_CHANNELS",
    "CategoryChoice",
    "Overview",
    "channel_default",
    "choices",
    "effective_defaults",
    "email_schedule",
    "outbound_default",
    "overview",
    "reschedule_pending",
    "save",
    "save_schedule",
    "schedules",
    "stop_all_email",
    "stored_rows",
]
