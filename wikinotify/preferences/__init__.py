"""What each reader wants: the one rule that says what she gets on each channel
(``rule``), the grid of categories and channels, read and saved (``grid``), the email
schedule and when a mail is due (``cadence``), and the pages and people she muted
(``mutes``). What callers use of ``rule`` and ``grid`` is re-exported here."""

from __future__ import annotations

from .grid import (
    CategoryChoice,
    Overview,
    choices,
    effective_defaults,
    email_schedule,
    every_schedule,
    overview,
    reschedule_pending,
    resume_email,
    save,
    save_schedule,
    schedules,
    stop_all_email,
    stored_channels,
    stored_rows,
)
from .rule import (
    BASE_CHANNELS,
    CHANNEL_FIELDS,
    OUTBOUND_CHANNELS,
    channel_default,
    effective,
    outbound_default,
)

__all__ = [
    "BASE_CHANNELS",
    "CHANNEL_FIELDS",
    "OUTBOUND_CHANNELS",
    "CategoryChoice",
    "Overview",
    "channel_default",
    "choices",
    "effective",
    "effective_defaults",
    "email_schedule",
    "every_schedule",
    "outbound_default",
    "overview",
    "reschedule_pending",
    "save",
    "save_schedule",
    "schedules",
    "resume_email",
    "stop_all_email",
    "stored_channels",
    "stored_rows",
]
