"""A page you watch was edited, moved, (un)published, scheduled or deleted."""

from __future__ import annotations

from ..catalogue import gettext, ngettext
from . import candidates
from .base import ALL_ORIGINS, N_, Category, Channels, EntryView, Np_
from .page_deleted import PAGE_DELETED

#: How each variant reads, once or more than twice, and twice: English says "moved
#: twice", not "moved 2 times", and other languages have words of their own for it too.
TIMES = {
    "edited": Np_("edited", "edited %(num)d times"),
    "moved": Np_("moved", "moved %(num)d times"),
    "published": Np_("published", "published %(num)d times"),
    "unpublished": Np_("unpublished", "unpublished %(num)d times"),
    "scheduled": Np_("given a publishing window", "given a publishing window %(num)d times"),
    "deleted": Np_("deleted", "deleted %(num)d times"),
}
TWICE = {
    "edited": N_("edited twice"),
    "moved": N_("moved twice"),
    "published": N_("published twice"),
    "unpublished": N_("unpublished twice"),
    "scheduled": N_("given a publishing window twice"),
    "deleted": N_("deleted twice"),
}
BY = N_("%(title)s was %(what)s by %(actor)s")
LAST_BY = N_("%(title)s was %(what)s, last by %(actor)s")
VIA_SYNC = N_("%(title)s was %(what)s via storage sync")
AND = N_("%(first)s and %(last)s")
#: A mail's subject: "Onboarding: 3 edits by Bob Builder and Carol Danvers"; "3 changes"
#: where the entry holds more than edits, "page deleted" where it holds only a deletion.
EDITS = Np_("%(num)d edit", "%(num)d edits")
CHANGES = Np_("%(num)d change", "%(num)d changes")


def variant_counts(entry: EntryView) -> dict[str, int]:
    """How many of the entry's events were each variant, edits first, then the others in
    the order they came. The fan-out keeps the counts in the entry's data."""
    stored = entry.snapshot.get("variant_counts") or {}
    ordered = sorted((v for v in entry.variants if v in TIMES), key=lambda v: v != "edited")
    if stored and sum(stored.values()) == entry.count:
        return {v: stored[v] for v in ordered if stored.get(v)}
    # An entry written before the counts were kept: each variant other than an edit is
    # taken to have happened once, and the edits are the rest.
    counts = {v: 1 for v in ordered if v != "edited"}
    edits = entry.count - len(counts)
    return {"edited": edits, **counts} if "edited" in ordered and edits > 0 else counts


def times(variant: str, num: int) -> str:
    """The variant said ``num`` times: "moved", "moved twice", "moved 3 times"."""
    return gettext(TWICE[variant]) if num == 2 else ngettext(*TIMES[variant], num)


def what_happened(entry: EntryView) -> str:
    """Every variant the entry absorbed: "edited 12 times", "edited 3 times and moved
    twice"."""
    parts = [times(variant, num) for variant, num in variant_counts(entry).items()]
    if not parts:  # only variants this category has no words for: still a change
        return times("edited", entry.count)
    if len(parts) == 1:
        return parts[0]
    return gettext(AND, first=", ".join(parts[:-1]), last=parts[-1])


def describe(entry: EntryView) -> str:
    what = what_happened(entry)
    if entry.actor is None:  # an import or a git pull: nobody to name
        return gettext(VIA_SYNC, title=entry.title, what=what)
    template = BY if entry.count == 1 else LAST_BY
    return gettext(template, title=entry.title, what=what, actor=entry.actor)


def summary(entry: EntryView) -> str:
    counts = variant_counts(entry)
    if set(counts) == {"deleted"}:
        return gettext(PAGE_DELETED)
    return ngettext(*(EDITS if set(counts) <= {"edited"} else CHANGES), entry.count)


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
    # Told to anyone, of a page a guest may read: its edits are there for all to see.
    told_to_anyone=True,
    # A git pull rewriting a watched page is news too; it reads "via storage sync".
    origins=ALL_ORIGINS,
    group_key=lambda event: f"watchedPage:{event.page_id}",
    describe=describe,
    summary=summary,
    strings=(*TIMES.values(), *TWICE.values(), BY, LAST_BY, VIA_SYNC, AND, EDITS, CHANGES),
)
