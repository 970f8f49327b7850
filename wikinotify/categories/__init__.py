"""The category registry. A new kind of notification is one module (here, or in the
wiki's own package: ``flask wikinotify new-category``), one ``emit`` call in the wiki and
its strings (docs/adopting.md#adding-a-kind-of-notification).

The launch categories (docs/rules.md#the-launch-categories), with priorities deciding who wins when
one event reaches a person twice (docs/rules.md#one-entry-per-person-per-event):

=====================  ========  ==================================================
key                    priority  why
=====================  ========  ==================================================
``mention``            40        addressed to you by name
``reviewRequested``    35        someone waits on you (alone on submission events)
``commentReply``       30        an answer to you
``watchedPage``        20        a page you chose to follow
``watchedPageComment`` 10        talk on a page you follow
``pageCreated``        5         opt-in firehose (alone on page:create)
``pageDeleted``        5         opt-in firehose, below ``watchedPage``
=====================  ========  ==================================================

``announcement`` (priority 60, alone on ``announcement:publish``) is an administrator's
word to everyone on a site or to some of its groups (docs/rules.md#announcements).

Beside them, ``suggestionReviewed`` (priority 30, alone on ``submission:review``): a
reviewer's answer to your suggestion (docs/rules.md#the-launch-categories).

Each says whether anyone may hear of it (``told_to_anyone``): a site-wide webhook hears
of ``watchedPage``, ``watchedPageComment``, ``pageCreated`` and ``pageDeleted`` on a page a
guest may read, and never of the others, which are said to their own readers alone.
"""

from __future__ import annotations

from . import (
    announcement,
    comment_reply,
    mention,
    page_created,
    page_deleted,
    review_requested,
    suggestion_reviewed,
    watched_page,
    watched_page_comment,
)
from .base import (
    EVENT_KINDS,
    N_,
    ORIGINS,
    SECTIONS,
    Category,
    CategoryError,
    Channels,
    EntryView,
    FanoutContext,
    Np_,
    Registry,
    actor_or_someone,
)
from .candidates import permission_holders

#: The library's categories, in the order the preferences page lists them: the seven
#: launch categories (docs/rules.md#the-launch-categories), the answer to a suggestion and
#: announcements.
LAUNCH_CATEGORIES: tuple[Category, ...] = (
    watched_page.category,
    watched_page_comment.category,
    mention.category,
    comment_reply.category,
    review_requested.category,
    suggestion_reviewed.category,
    page_created.category,
    page_deleted.category,
    announcement.category,
)

__all__ = [
    "EVENT_KINDS",
    "LAUNCH_CATEGORIES",
    "N_",
    "ORIGINS",
    "SECTIONS",
    "Category",
    "CategoryError",
    "Channels",
    "EntryView",
    "FanoutContext",
    "Np_",
    "Registry",
    "actor_or_someone",
    "permission_holders",
]
