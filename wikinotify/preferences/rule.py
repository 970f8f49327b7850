"""The effective preference (docs/rules.md#preferences-are-stored-only-where-they-differ): what a
reader gets of a category on each channel. The fan-out, the mail drain, the webhook, chat and
push deliveries and the preferences page and API all ask :func:`effective`, so they cannot disagree
(tests/test_preference_rule.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ..categories import Category, Channels
from ..models import Channel

#: Channel name in the API and the table → field of :class:`Channels`, in the grid's order.
CHANNEL_FIELDS: dict[str, str] = {
    Channel.IN_APP: "in_app", Channel.EMAIL: "email", Channel.WEBHOOK: "webhook",
    Channel.CHAT: "chat", Channel.PUSH: "push",
}
#: The channels every reader has: the grid always shows them.
BASE_CHANNELS = (Channel.IN_APP, Channel.EMAIL)
#: The channels a reader has once she sets one up (an endpoint of that kind; for push, a
#: browser subscribed): the grid shows a column for each she has
#: (docs/rules.md#the-preferences-page). Without one, the channel sends nothing, whatever
#: its cells say: push is off until a browser subscribes.
OUTBOUND_CHANNELS = (Channel.WEBHOOK, Channel.CHAT, Channel.PUSH)


def outbound_default(category: Category) -> bool:
    """Whether a category goes to a reader's webhook, chat or push when she has not said: as
    it goes to her mail (docs/rules.md#the-preferences-page)."""
    return category.defaults.email


def channel_default(category: Category, channel: str) -> bool:
    """The category's default on ``channel`` (a key of :data:`CHANNEL_FIELDS`)."""
    if channel in OUTBOUND_CHANNELS:
        return outbound_default(category)
    return bool(getattr(category.defaults, CHANNEL_FIELDS[channel]))


def effective(
    category: Category, stored: Mapping[str, bool], *, mail_on: bool, required: bool = False
) -> Channels:
    """What a reader gets of ``category``: on each channel her stored row (``stored``:
    channel → enabled, her rows of this category) where she has one, else the category's
    default; and no email while this instance cannot send mail
    (docs/rules.md#the-launch-categories), whatever she stored. ``required``: the event
    reaches her inbox whatever she stored (``Category.in_app_required``, an important
    announcement, docs/rules.md#announcements); her other channels stay hers. Whether she
    can take a mail or has an endpoint is her own fact, not asked."""

    def on(channel: str) -> bool:
        found = stored.get(channel)
        return channel_default(category, channel) if found is None else found

    return Channels(required or on(Channel.IN_APP), on(Channel.EMAIL) and mail_on,
                    on(Channel.WEBHOOK), on(Channel.CHAT), on(Channel.PUSH))
