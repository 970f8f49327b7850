"""wikinotify's own notice: one of your webhooks or chat targets was turned off
(docs/channels.md#webhooks).

Emitted by the delivery engine when a receiver answers 410 Gone or every delivery to it
failed for three days; it reaches the endpoint's owner in-app only. It is not on the
preferences page (``visible_to`` says no one): a notice that a channel of yours stopped is
not something to opt out of, and it is not mailed or sent to the channels it is about.
"""

from __future__ import annotations

from ..catalogue import gettext
from ..models import EndpointKind
from .base import N_, ORIGINS, Category, Channels, EntryView

KIND = "endpoint:disabled"
TURNED_OFF = N_("Your %(kind)s %(title)s was turned off: %(reason)s")
WEBHOOK = N_("webhook")
CHAT = N_("chat target")
PUSH = N_("browser push subscription")
#: What each kind of endpoint is called in the notice.
KINDS: dict[str, str] = {EndpointKind.WEBHOOK: WEBHOOK, EndpointKind.CHAT: CHAT,
                         EndpointKind.PUSH: PUSH}
#: The reasons, kept as msgids on the event so the sentence is in the reader's language.
GONE = N_("the receiver answered 410 Gone.")
FAILING = N_("every delivery failed for three days.")


def describe(entry: EntryView) -> str:
    snapshot = entry.snapshot
    kind = gettext(KINDS.get(str(snapshot.get("kind")), WEBHOOK))
    reason = snapshot.get("reason") or FAILING
    return gettext(TURNED_OFF, kind=kind, title=entry.title, reason=gettext(reason))


def _owner(ctx: object, event: object, after: str | None, limit: int) -> list[str]:
    owner = getattr(event, "data", {}).get("owner_id")
    return [owner] if owner and after is None else []


category = Category(
    key="endpointDisabled",
    events=frozenset({KIND}),
    section="everything",
    title=N_("Turned-off webhooks and chat targets"),
    description=N_("One of your webhooks or chat targets was turned off."),
    defaults=Channels(in_app=True, email=False),
    priority=50,
    recipients=_owner,
    scope="instance",
    # About one person's endpoint, never a page: nobody else's to hear of.
    told_to_anyone=False,
    origins=ORIGINS,
    digest=False,
    visible_to=lambda viewer, is_admin: False,
    group_key=lambda event: f"endpointDisabled:{event.data.get('endpoint_id')}",
    describe=describe,
    strings=(TURNED_OFF, WEBHOOK, CHAT, GONE, FAILING),
)
