"""A category of the wiki's own, written outside wikinotify as a host writes one: the
worked example (docs/adopting.md#adding-a-kind-of-notification), a storage target that failed to
sync.

It concerns the whole wiki rather than a page (``scope="instance"``: its entries show on
every site), fires whatever the origin of the sync, tells the accounts holding
``manage:system`` and shows on administrators' preferences pages. Its group key is the
target, so a target failing every five minutes is one entry until somebody reads it. Its
strings are in the wiki's own catalogue (``tests/translations``), not wikinotify's.
"""

from __future__ import annotations

from flask_babel import ngettext

from wikinotify.categories import (
    N_,
    ORIGINS,
    Category,
    Channels,
    EntryView,
    Np_,
    permission_holders,
)
from wikinotify.host import UserFacts
from wikinotify.models import Event

PERMISSION = "manage:system"
FAILED = Np_("Syncing to %(title)s failed", "Syncing to %(title)s failed %(num)d times")


def describe(entry: EntryView) -> str:
    return ngettext(*FAILED, entry.count, title=entry.title)


def group_key(event: Event) -> str:
    return f"storageSyncFailed:{event.data.get('target_id')}"


def visible_to(viewer: UserFacts, is_admin: bool) -> bool:
    return is_admin


category = Category(
    key="storageSyncFailed",
    events=frozenset({"storage:syncFailed"}),
    section="everything",
    title=N_("Storage sync failures"),
    description=N_("A storage target fails to sync."),
    defaults=Channels(in_app=True, email=True),
    priority=15,
    recipients=permission_holders(PERMISSION),
    group_key=group_key,
    scope="instance",
    # For those who look after the wiki: a site-wide webhook, outside it, hears nothing.
    told_to_anyone=False,
    origins=ORIGINS,
    visible_to=visible_to,
    describe=describe,
    strings=(FAILED,),
)
