"""A page you watch was edited, moved, (un)published, scheduled or deleted."""

from __future__ import annotations

from flask_babel import gettext, ngettext

from . import candidates
from .base import ALL_ORIGINS, N_, Category, Channels, EntryView, Np_

EDITED = Np_("edited", "edited %(num)d times")
#: What each other variant adds to the sentence ("edited 4 times and moved").
VARIANT_WORDS = {
    "moved": N_("moved"),
    "published": N_("published"),
    "unpublished": N_("unpublished"),
    "scheduled": N_("given a publishing window"),
    "deleted": N_("deleted"),
}
BY = N_("%(title)s was %(what)s by %(actor)s")
LAST_BY = N_("%(title)s was %(what)s, last by %(actor)s")
VIA_SYNC = N_("%(title)s was %(what)s via storage sync")
AND = N_("%(first)s and %(last)s")


def what_happened(entry: EntryView) -> str:
    """Every variant the entry absorbed: "edited 12 times", "edited 4 times and moved"."""
    others = [gettext(VARIANT_WORDS[v]) for v in entry.variants if v in VARIANT_WORDS]
    edits = entry.count - len(others)
    parts = [ngettext(*EDITED, edits)] if "edited" in entry.variants and edits > 0 else []
    parts += others
    if len(parts) == 1:
        return parts[0]
    return gettext(AND, first=", ".join(parts[:-1]), last=parts[-1])


def describe(entry: EntryView) -> str:
    what = what_happened(entry)
    if entry.actor is None:  # an import or a git pull: nobody to name
        return gettext(VIA_SYNC, title=entry.title, what=what)
    template = BY if entry.count == 1 else LAST_BY
    return gettext(template, title=entry.title, what=what, actor=entry.actor)


category = Category(
    key="watchedPage",
    events=frozenset({"page:edit", "page:rename", "page:delete"}),
    section="watching",
    title=N_("Pages you watch"),
    description=N_("A page you watch is edited, moved, published or deleted."),
    defaults=Channels(in_app=True, email=True),
    priority=20,
    recipients=candidates.page_watchers,
    access_checks=("read:pages",),
    # A git pull rewriting a watched page is news too; it reads "via storage sync".
    origins=ALL_ORIGINS,
    group_key=lambda event: f"watchedPage:{event.page_id}",
    describe=describe,
    strings=(EDITED, *VARIANT_WORDS.values(), BY, LAST_BY, VIA_SYNC, AND),
)
