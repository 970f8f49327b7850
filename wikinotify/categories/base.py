"""What a category is (docs/rules.md#a-category-is-a-module), and the registry that holds them."""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..catalogue import gettext, ngettext
from ..host import READ_PAGES
from ..models import Channel, Origin

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ..host import Host, UserFacts
    from ..models import Event

#: The event kinds of the wiki itself (docs/rules.md#emit), which the launch categories listen to
#: and the reference host emits. A host's own category may listen to kinds of its own
#: (``storage:syncFailed``, docs/adopting.md#adding-a-kind-of-notification): ``emit`` accepts any
#: kind a registered category listens to. These nouns are wikinotify's: a category listening to
#: ``page:renamed`` is refused at start-up, so a typo cannot silently make it deaf.
EVENT_KINDS = frozenset(
    {
        "page:create",
        "page:edit",
        "page:rename",
        "page:delete",
        "submission:new",
        "submission:update",
        # A reviewer approved or rejected a suggestion (variant ``approved``/``rejected``);
        # the approval's own save is a ``page:edit`` by the reviewer (docs/rules.md#emit).
        "submission:review",
        "comment:new",
        "comment:edit",
        "comment:delete",
    }
)

#: The shape of an event kind: ``noun:verb``, each a camelCase word (``page:edit``,
#: ``storage:syncFailed``).
EVENT_KIND = re.compile(r"[a-z][a-zA-Z0-9]*:[a-z][a-zA-Z0-9]*")
#: The longest kind the outbox stores (``wikinotify_events.kind``).
EVENT_KIND_LENGTH = 64
BUILT_IN_NOUNS = frozenset(kind.partition(":")[0] for kind in EVENT_KINDS)

#: Where an event came from (:class:`~wikinotify.models.Origin`), as the plain names a
#: category's ``origins`` holds.
ORIGINS = frozenset(origin.value for origin in Origin)
ALL_ORIGINS = ORIGINS

#: The link targets, where an entry can lead (``Category.link_section``, the name hosts
#: set): the page, its discussion (the entry's own comment, when it names one) or its
#: suggestions (the entry's own suggestion).
LINK_TARGETS = (None, "comments", "review")

#: The sections of the preferences page, its headings, in order
#: (docs/rules.md#the-preferences-page). In wikinotify a section is one of these only: where an
#: entry leads is its link target (:data:`LINK_TARGETS`), what a host showed a view
#: (:data:`wikinotify.inbox.viewing.VIEWS`); the host interface's older names for those two
#: (``link_section``, ``page_url``'s and ``mark_seen``'s ``section``) stay as they are.
SECTIONS = ("watching", "discussions", "reviews", "everything")

SCOPES = frozenset({"site", "instance"})

#: The permission that reads a page. Told to anyone (a receiver outside the wiki, checked
#: as a guest), an entry about a page needs it whatever its category asks of its own
#: readers: ``reviewRequested`` asks them nothing, the approval rule being their grant.
READ_PAGE = READ_PAGES


def N_(message: str) -> str:
    """Mark ``message`` for extraction without translating it yet.

    Category strings are translated when shown, in the viewer's language; the registry
    keeps the English msgid so start-up can check every language has it.
    """
    return message


#: A msgid, or a (singular, plural) pair for ``ngettext``.
Msgid = str | tuple[str, str]


@dataclass(frozen=True)
class EntryView:
    """An inbox entry as a category's sentence sees it (docs/rules.md#the-inbox-page): the snapshot,
    not the page, since the page may have been renamed or deleted since."""

    count: int
    variant: str
    variants: tuple[str, ...]
    title: str
    actor: str | None
    snapshot: Mapping[str, Any]


def actor_or_someone(entry: EntryView) -> str:
    return entry.actor or gettext("Someone")


def Np_(singular: str, plural: str) -> tuple[str, str]:
    """Mark a plural pair for extraction (``-k Np_:1,2``); translated with ``ngettext``."""
    return (singular, plural)


def counted(pair: tuple[str, str]) -> Callable[[EntryView], str]:
    """A ``summary`` that counts the entry's events: ``Np_("%(num)d edit", "%(num)d edits")``."""
    return lambda entry: ngettext(*pair, entry.count)


class Channels(NamedTuple):
    in_app: bool
    email: bool
    #: A reader's own outbound channels (docs/channels.md#webhooks): on only where she has set one
    #: up. A category's ``defaults`` leave them False: their default is the email one.
    webhook: bool = False
    chat: bool = False
    push: bool = False

    def as_json(self) -> dict[str, bool]:
        return {Channel.IN_APP: self.in_app, Channel.EMAIL: self.email}


@dataclass
class FanoutContext:
    """What a category's ``recipients`` may use: the wiki and the database session."""

    host: Host
    session: Session


#: ``recipients(ctx, event, after, limit)``: a keyset batch of candidate user ids.
RecipientSource = Callable[[FanoutContext, "Event", "str | None", int], list[str]]


def _always(viewer: UserFacts, is_admin: bool) -> bool:
    return True


def _never(event: Event) -> bool:
    return False


def _no_body(snapshot: Mapping[str, Any]) -> str | None:
    return None


def _event_variant(event: Event) -> str:
    return event.data.get("variant") or "default"


def _event_snapshot(event: Event) -> dict[str, Any]:
    return dict(event.data.get("snapshot") or {})


@dataclass(frozen=True)
class Category:
    """One kind of notification. Each lives in its own module under ``categories/``.

    ``recipients`` yields *candidates*: the fan-out removes the actor, checks access,
    applies preferences and deduplicates for every category alike
    (docs/rules.md#a-category-is-a-module).
    """

    #: The preference key and the prefix of its strings, e.g. ``watchedPage``.
    key: str
    #: Event kinds it listens to: the wiki's own (:data:`EVENT_KINDS`) or kinds of the
    #: host's own, ``noun:verb`` (``storage:syncFailed``); ``emit`` accepts those too.
    events: frozenset[str]
    #: Which section of the preferences page (:data:`SECTIONS`) it sits under.
    section: str
    #: Title and one-line description on the preferences page (English msgids).
    title: str
    description: str
    defaults: Channels
    #: Higher wins when one event reaches a person through several categories
    #: (docs/rules.md#one-entry-per-person-per-event).
    priority: int
    recipients: RecipientSource
    #: ``group_key(event)``: the coalescing key (docs/rules.md#coalescing-is-idempotency).
    group_key: Callable[[Event], str]
    #: The page permissions a person must hold to be told, checked at the fan-out and
    #: again every time the entry is shown or mailed (docs/rules.md#access). A comment needs the
    #: page too: ``("read:pages", "read:comments")``, as the wiki itself asks.
    access_checks: tuple[str, ...] = ()
    scope: str = "site"
    origins: frozenset[str] = frozenset({Origin.USER.value})
    #: Whether an email digest may hold it back; ``False`` for what someone waits on.
    digest: bool = True
    #: Opt-in categories are grouped under "Everything on the wiki" with a busy note.
    opt_in: bool = False
    visible_to: Callable[[UserFacts, bool], bool] = _always
    variant: Callable[[Event], str] = _event_variant
    snapshot: Callable[[Event], dict[str, Any]] = _event_snapshot
    #: ``describe(entry)``: the entry's sentence in the current language
    #: (docs/rules.md#the-inbox-page).
    describe: Callable[[EntryView], str] = lambda entry: entry.title
    #: Whether anyone may hear of its entries at all: the site-wide webhooks, whose
    #: receivers are outside the wiki. ``False`` keeps them to their own readers (a
    #: suggestion waiting for review, a verdict, a mention). ``True`` lets an entry about
    #: a page go out when a guest may read the page, and one about no page (a host's
    #: category about the wiki, docs/adopting.md#adding-a-kind-of-notification) always. No default:
    #: left ``None``, the category is refused at registration, since "anyone may hear of it" is a
    #: decision.
    told_to_anyone: bool | None = None
    #: The link target (:data:`LINK_TARGETS`), the part of the page an entry leads to: the
    #: page, ``"comments"`` (the entry's comment, :meth:`Host.comment_url`) or
    #: ``"review"`` (its suggestion, :meth:`Host.suggestion_url`). A view of that part
    #: marks the entry read. (``section`` above is the preferences page's heading.)
    link_section: str | None = None
    #: Variants that link elsewhere than ``link_section``: ``{"rejected": "review"}``.
    #: Left out of the hash, which a dict cannot join.
    variant_links: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    #: ``summary(entry)``: what happened, as a mail's subject says it between the page's
    #: title and who did it ("Onboarding: 3 edits by Bob Builder and Carol Danvers":
    #: "3 edits"); ``None``: the subject is the entry's sentence
    #: (docs/rules.md#what-a-mail-says). Its msgids go in ``strings`` too.
    summary: Callable[[EntryView], str] | None = None
    #: Every msgid ``describe`` (and ``summary``) uses, checked in every language at
    #: start-up like the title and description.
    strings: tuple[Msgid, ...] = field(default=())
    #: ``in_app_required(event)``: whether this event reaches its readers' inboxes
    #: whatever they chose (an important announcement); the preference rule applies it
    #: (:func:`wikinotify.preferences.rule.effective`).
    in_app_required: Callable[[Event], bool] = _never
    #: An unread entry shows first in the inbox and the bell menu until it is read
    #: (docs/rules.md#announcements).
    pinned: bool = False
    #: ``body(snapshot)``: the entry's own text, shown under its sentence with its web
    #: addresses made links (an announcement's body); ``None``: none. Never page content.
    body: Callable[[Mapping[str, Any]], str | None] = _no_body

    def msgids(self) -> Iterator[Msgid]:
        yield self.title
        yield self.description
        yield from self.strings

    def link_for(self, variant: str) -> str | None:
        """The link target of an entry of ``variant``."""
        return self.variant_links.get(variant, self.link_section)

    def listens_to(self, kind: str, origin: str) -> bool:
        return kind in self.events and origin in self.origins


class CategoryError(RuntimeError):
    """A category definition that cannot work; raised at start-up."""


def validate(category: Category) -> None:
    """Refuse a category whose fields cannot work, naming it and the field."""
    name = f"notification category {category.key!r}"
    if not category.key.isidentifier() or keyword.iskeyword(category.key):
        raise CategoryError(f"{name}: the key must be an identifier like 'watchedPage'")
    check_event_kinds(name, category.events)
    unknown_origins = sorted(set(category.origins) - ORIGINS)
    if not category.origins or unknown_origins:
        raise CategoryError(f"{name} has unknown origins {unknown_origins}")
    if category.scope not in SCOPES:
        raise CategoryError(f"{name} has scope {category.scope!r}; use 'site' or 'instance'")
    if category.section not in SECTIONS:
        raise CategoryError(f"{name} has section {category.section!r}; use one of {SECTIONS}")
    if not category.title or not category.description:
        raise CategoryError(f"{name} needs a title and a description")
    links = {category.link_section, *category.variant_links.values()}
    if not links <= set(LINK_TARGETS):
        raise CategoryError(
            f"{name} links to {sorted(map(str, links - set(LINK_TARGETS)))}; "
            f"use one of {LINK_TARGETS}"
        )
    checks = category.access_checks
    if not isinstance(checks, tuple) or not all(isinstance(c, str) and c for c in checks):
        raise CategoryError(
            f"{name} has access_checks {checks!r}; give a tuple of permission names such "
            "as ('read:pages',)"
        )
    if not isinstance(category.told_to_anyone, bool):
        raise CategoryError(
            f"{name} must say whether its entries may be told to anyone: set "
            "told_to_anyone=False (only its own readers hear of them) or True (the "
            "site-wide webhooks, outside the wiki, may too, of a page a guest may read)"
        )


def check_event_kinds(name: str, events: frozenset[str]) -> None:
    """Refuse, naming ``name``, event kinds that are not ``noun:verb`` or that misspell
    one of wikinotify's own."""
    if not events or isinstance(events, str):
        raise CategoryError(f"{name} needs the event kinds it listens to, as a set such as "
                            "frozenset({'storage:syncFailed'})")
    for kind in sorted(events, key=str):
        if not isinstance(kind, str) or len(kind) > EVENT_KIND_LENGTH or not (
            EVENT_KIND.fullmatch(kind)
        ):
            raise CategoryError(
                f"{name} listens to the malformed event kind {kind!r}; a kind is "
                f"'noun:verb', each a camelCase word, at most {EVENT_KIND_LENGTH} characters "
                "(e.g. 'storage:syncFailed')"
            )
        noun = kind.partition(":")[0]
        if noun in BUILT_IN_NOUNS and kind not in EVENT_KINDS:
            built_in = sorted(k for k in EVENT_KINDS if k.startswith(noun + ":"))
            raise CategoryError(
                f"{name} listens to {kind!r}, which is not one of wikinotify's {noun!r} "
                f"kinds {built_in}; a kind of your own takes a noun of its own "
                "(e.g. 'storage:syncFailed')"
            )


class Registry(Mapping[str, Category]):
    """The categories an app notifies through, by key, in registration order."""

    def __init__(
        self, categories: Iterable[Category] = (), *, known_kinds: Iterable[str] = ()
    ) -> None:
        self._by_key: dict[str, Category] = {}
        #: The kinds ``emit`` accepts: the wiki's own, every kind a category given here
        #: listens to, and ``known_kinds`` (those of categories a selection left out,
        #: whose events are then dropped quietly rather than warned about).
        self._kinds: set[str] = set(EVENT_KINDS) | set(known_kinds)
        for category in categories:
            self.register(category)

    def check(self, category: Category) -> None:
        """Refuse ``category`` as :meth:`register` would, without registering it."""
        validate(category)
        if category.key in self._by_key:
            raise CategoryError(
                f"notification category {category.key!r} is registered twice; "
                "each key must be unique"
            )

    def register(self, category: Category) -> None:
        self.check(category)
        self._by_key[category.key] = category
        self._kinds.update(category.events)

    def knows(self, kind: str) -> bool:
        """Whether ``kind`` is one ``emit`` accepts: the wiki's own, or one a category
        registered here listens to."""
        return kind in self._kinds

    def __getitem__(self, key: str) -> Category:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def listening(self, kind: str, origin: str) -> list[Category]:
        """The categories an event of ``kind`` from ``origin`` reaches, highest priority
        first."""
        found = [c for c in self._by_key.values() if c.listens_to(kind, origin)]
        return sorted(found, key=lambda c: c.priority, reverse=True)

    def visible_to(self, viewer: UserFacts, is_admin: bool) -> list[Category]:
        """The categories shown to ``viewer``, ordered by section, then registration."""
        visible = [c for c in self._by_key.values() if c.visible_to(viewer, is_admin)]
        return sorted(visible, key=lambda c: SECTIONS.index(c.section))

    def select(self, keys: Iterable[str]) -> Registry:
        """A registry of only ``keys`` (``WIKINOTIFY_CATEGORIES``), refusing unknown ones."""
        keys = list(keys)
        unknown = [k for k in keys if k not in self._by_key]
        if unknown:
            raise CategoryError(
                f"WIKINOTIFY_CATEGORIES names unknown categories {unknown}; "
                f"known ones are {sorted(self._by_key)}"
            )
        return Registry((self._by_key[k] for k in keys), known_kinds=self._kinds)
