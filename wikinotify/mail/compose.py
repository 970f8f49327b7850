"""Notification mail (docs/rules.md#what-a-mail-says): one entry or a digest, text and HTML bodies,
in the recipient's language, with the RFC 8058 headers on every message."""

from __future__ import annotations

import email.policy
import functools
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.header import Header
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formataddr, formatdate, make_msgid, quote
from typing import Any
from urllib.parse import urlsplit

from babel.support import NullTranslations
from flask import current_app, render_template
from flask_mail import Message
from jinja2 import pass_context
from jinja2.ext import _make_new_gettext, _make_new_ngettext
from jinja2.runtime import Context
from werkzeug.routing import Map, MapAdapter

from ..catalogue import gettext, ngettext, translating
from ..categories import Registry
from ..categories.base import N_, Np_
from ..config import config
from ..host import Host, SiteFacts, UserFacts
from ..i18n import SOURCE_LANGUAGE
from ..inbox.presentation import Presented, actor_names, present, view_of
from ..models import ACTORS, ACTORS_KEPT, NotificationRow
from ..state import state
from .dkim import DkimKey
from .tokens import make_mute_token, thread_key

#: A mail shows at most this many entries; the rest are "and N more" (docs/rules.md#the-mail-run).
SHOWN = 50

_LINE_BREAK = re.compile(r"\n|\r")  # as email.policy splits a value it parses

#: What a header value must not carry: a CR or LF would end the header (Flask-Mail
#: refuses such a mail at send time), and the other controls and Unicode's line and
#: paragraph separators garble it in mail clients.
_CONTROLS = re.compile(r"\s*[\x00-\x1f\x7f-\x9f\u2028\u2029]+\s*")

#: RFC 5322's limit on a line, without its CRLF.
_LINE_LIMIT = 998


def header_safe(value: str) -> str:
    """``value`` on one line: each run of control characters, with the spaces around
    it, folded to one space."""
    return _CONTROLS.sub(" ", value).strip()


def as_is(name: str, value: str) -> bool:
    """Whether the header ``name: value`` is written, and read back, as it is: printable
    ASCII on one line, with no ``=?`` a reader could take for the start of an RFC 2047
    encoded word (which it would decode, into a line break as readily as into a
    letter)."""
    return (value.isascii() and value.isprintable() and "=?" not in value
            and len(name) + 2 + len(value) <= _LINE_LIMIT)


def encoded_words(name: str, text: str) -> str:
    """``text`` as RFC 2047 encoded words, folded: what a reader decodes is ``text``,
    letter for letter, ``=?`` included. ``Header`` encodes what it is given and parses
    nothing; its own default (78) makes 76-character words, RFC 2047 allows 75."""
    return Header(text, "utf-8", header_name=name).encode(linesep="\r\n", maxlinelen=76)


class BuiltHeader(str):
    """A header value built here and written out as it was built: the policy keeps an
    object with a ``name`` as it is, and the generator asks it to fold itself, so the
    library never parses it (a parse decodes encoded words). As a string it is the
    text the header says."""

    name: str
    written: str

    def __new__(cls, name: str, text: str, written: str) -> BuiltHeader:
        header = super().__new__(cls, text)
        header.name, header.written = name, written
        return header

    def fold(self, *, policy: email.policy.Policy) -> str:
        lines = self.written.split("\r\n")
        return f"{self.name}: " + policy.linesep.join(lines) + policy.linesep


def text_header(name: str, value: str) -> BuiltHeader:
    """The header ``name`` saying ``value`` (text the wiki's users typed: titles, names)
    and nothing more: on one line, written as it is where a reader can take it only for
    that text, else as encoded words that decode to it."""
    text = header_safe(value)
    return BuiltHeader(name, text, text if as_is(name, text) else encoded_words(name, text))


class _Policy(email.policy.EmailPolicy):
    """The standard policy, but a header whose value would be written as it is anyway
    (:func:`as_is`) is kept as that string. The standard one parses every header it is
    given into an object and folds it back on the way out: half the cost of building a
    mail, for the same bytes. A value read back is parsed then (``message["To"]``), as
    for a parsed mail, and the parse is kept: building the parts reads ``Content-Type``
    again and again, and its values repeat from mail to mail (a parsed header is an
    immutable ``str``). How many of a header a message may have is asked at every header
    set, and the registry answers with a class made afresh each time: that too is kept."""

    def header_store_parse(self, name: str, value: Any) -> tuple[str, Any]:
        if isinstance(value, str) and as_is(name, value):
            return (name, value)
        return super().header_store_parse(name, value)

    def header_fetch_parse(self, name: str, value: Any) -> Any:
        if hasattr(value, "name"):
            return value
        return _parsed(self.header_factory, name, value)

    def header_max_count(self, name: str) -> int | None:
        return _max_count(self.header_factory, name.lower())


@functools.lru_cache(maxsize=256)
def _parsed(factory: Any, name: str, value: str) -> Any:
    """``EmailPolicy.header_fetch_parse``'s parse, shared by the build and wire policies."""
    return factory(name, "".join(_LINE_BREAK.split(value)))


@functools.cache
def _max_count(factory: Any, name: str) -> int | None:
    count: int | None = factory[name].max_count
    return count


#: How a mail's parts are built: 7-bit clean bodies (quoted-printable where a line is not
#: ASCII), so a relay without 8BITMIME has nothing to re-encode and a DKIM signature over
#: the body survives the trip; quoted-printable lines stay within 76 characters.
_BUILD = _Policy(linesep="\r\n", cte_type="7bit")
#: How a mail is written out. The List-Unsubscribe URL is longer than 78 characters with
#: nowhere to fold; at the default limit the generator RFC 2047-encodes it, and mail
#: clients then do not read it as <URL>. RFC 5322's hard limit is 998.
_WIRE = _BUILD.clone(max_line_length=998)


#: The multipart boundary of this process's mails (a body that holds it gets one the
#: generator makes): random, so nobody can write it in a page title ahead of the mail.
_BOUNDARY = f"=_{uuid.uuid4().hex}"


class NotificationMessage(Message):
    """A Flask-Mail message written as ``multipart/alternative`` at the top (text, then
    HTML), DKIM-signed on its way out when the wiki configured a key.

    Flask-Mail wraps the alternative in a ``multipart/mixed`` even with no attachment,
    which content filters read as a sign of bulk mail; Flask-Mail's connection only asks
    a message for :meth:`as_bytes`, so this builds the MIME itself.
    """

    dkim: DkimKey | None = None
    #: The ``List-Id`` header's value, encoded and folded already (:func:`list_id`).
    list_id: str | None = None
    #: The bytes :meth:`freeze` wrote.
    _frozen: bytes | None = None

    def headers(self) -> list[tuple[str, str]]:
        """The mail's own headers, in the order they are written (the MIME ones follow)."""
        headers: list[tuple[str, str]] = []
        if self.list_id is not None:
            # As it was built: the policy would refold it as unstructured text and break
            # its phrase (a title with "<" or a quote, or RFC 2047 words).
            headers.append(("List-Id", BuiltHeader("List-Id", self.list_id, self.list_id)))
        sender = self.sender if isinstance(self.sender, str) else formataddr(self.sender)
        headers += [
            # The subject is made of titles and names the wiki's users typed.
            ("Subject", text_header("Subject", self.subject or "")),
            ("From", sender),
            ("To", ", ".join(str(r) for r in self.recipients)),
            ("Date", formatdate(self.date, localtime=True)),
            ("Message-ID", self.msgId),
            *(self.extra_headers or {}).items(),
        ]
        return headers

    def mime(self) -> EmailMessage:
        message = EmailMessage(policy=_BUILD)
        for name, value in self.headers():
            message[name] = value
        message.set_content(self.body or "")
        message.add_alternative(self.html or "", subtype="html")
        # The generator would make a boundary and compile a pattern to search both bodies
        # for it, each mail. "=_" cannot occur in quoted-printable; a 7-bit body is asked.
        # One boundary for every mail of the process: reading the Content-Type back (the
        # generator does, twice) parses it, and the policy keeps the parse of a value seen
        # before; a boundary of its own made each mail's parse afresh, a sixth of its MIME.
        if not any(_BOUNDARY in (part or "") for part in (self.body, self.html)):
            message.set_boundary(_BOUNDARY)
        return message

    def freeze(self) -> None:
        """Write the message out now, dated now, and send those very bytes: the drain
        builds a mail while the one before it is with the relay, and hands its sending
        thread bytes, not work (:mod:`wikinotify.mail.sender`)."""
        if self.date is None:
            self.date = time.time()
        self._frozen = self._written()

    def as_bytes(self) -> bytes:
        return self._frozen if self._frozen is not None else self._written()

    def _written(self) -> bytes:
        raw = self.mime().as_bytes(policy=_WIRE)
        return raw if self.dkim is None else self.dkim.sign(raw) + raw

    def as_string(self) -> str:
        return self.as_bytes().decode("ascii")


def site_domain(site: SiteFacts) -> str:
    """The host name of ``site``'s URL, in ASCII (IDNA), without its port."""
    host = urlsplit(site.base_url).hostname or "localhost"
    return host.encode("idna").decode("ascii")


def list_id(site: SiteFacts) -> str:
    """RFC 2919's ``"Site title" <notifications.host>``: the phrase a quoted string, or
    RFC 2047 encoded words where a reader could not take the quoted string as it is."""
    identifier = f"<notifications.{site_domain(site)}>"
    title = header_safe(site.title)
    if not title:
        return identifier
    value = f'"{quote(title)}" {identifier}'
    if as_is("List-Id", value):
        return value
    return f"{encoded_words('List-Id', title)} {identifier}"


class Unbuildable(ValueError):
    """A message that cannot be built (a malformed address): no retry will fix it."""


def site_url(site: SiteFacts, endpoint: str, **values: Any) -> str:
    """An absolute URL of one of the app's routes on ``site`` (workers have no request).
    A digest links to eleven routes with a token (``t``, its mute and unsubscribe
    links), 15 µs a build: werkzeug's URL for the route is kept per site, and a token
    that needs no quoting is appended as werkzeug would write it."""
    token = values.get("t")
    if (values.keys() == {"t"} and isinstance(token, str) and _URL_SAFE.fullmatch(token)
            and (before := _before_token(current_app.url_map, site.base_url, endpoint))):
        return before + token
    return _adapter(current_app.url_map, site.base_url).build(endpoint, values,
                                                              force_external=True)


#: A token werkzeug writes in a query as it is (URL-safe base64, itsdangerous' dots).
_URL_SAFE = re.compile(r"[A-Za-z0-9_.-]+")


@functools.lru_cache(maxsize=256)
def _before_token(url_map: Map, base_url: str, endpoint: str) -> str | None:
    """werkzeug's URL of ``endpoint`` on ``base_url`` up to its token (``...?t=``), if
    the token is the query's only argument there (else ``None``: werkzeug builds it)."""
    url = _adapter(url_map, base_url).build(endpoint, {"t": "T"}, force_external=True)
    return url[:-1] if url.endswith("?t=T") else None


@functools.lru_cache(maxsize=64)
def _adapter(url_map: Map, base_url: str) -> MapAdapter:
    """The app's routes bound to ``base_url``, kept: a mail builds three to thirteen URLs
    on one site, and binding the map again for each was a tenth of a digest's links."""
    parts = urlsplit(base_url)
    return url_map.bind(parts.netloc, script_name=parts.path or "/", url_scheme=parts.scheme)


def absolute(site: SiteFacts, path: str) -> str:
    return site.base_url.rstrip("/") + "/" + path.lstrip("/")


def mail_locale(user: UserFacts, site: SiteFacts) -> str:
    """The recipient's language, else the site's primary one (docs/rules.md#what-a-mail-says)."""
    languages = config("LANGUAGES")
    for locale in (user.locale, site.primary_locale):
        if locale is not None and locale in languages:
            return locale
    return SOURCE_LANGUAGE


@dataclass(frozen=True)
class MailEntry:
    category: str
    category_title: str
    text: str
    link: str
    excerpt: str | None
    #: The page the entry is about (``None``: about no page), which a digest groups by.
    page_id: str | None = None
    page_title: str | None = None
    #: The page's path as the entry's snapshot has it, said as text beside its title so a
    #: reader can tell two pages of one title apart (docs/rules.md#what-a-mail-says).
    page_path: str | None = None
    #: When it last happened; the mail says it in its reader's zone (``reader_zone``).
    at: datetime | None = None
    #: The signed one-click "Mute this page" link (``None``: about no page).
    mute_url: str | None = None
    #: The entry's own plain text (an announcement's body, ``Category.body``).
    body: str | None = None


@dataclass(frozen=True)
class PageGroup:
    """A digest's entries about one page, by category; ``title`` ``None`` for those
    about no page."""

    title: str | None
    categories: list[tuple[str, list[MailEntry]]]
    mute_url: str | None = None
    path: str | None = None


def grouped(items: Sequence[MailEntry]) -> list[PageGroup]:
    """``items`` (newest first) by page, then by category: each page, and each category
    within it, where its newest entry comes, so the digest still reads newest first."""
    pages: dict[str | None, dict[str, list[MailEntry]]] = {}
    first: dict[str | None, MailEntry] = {}
    for item in items:
        first.setdefault(item.page_id, item)
        pages.setdefault(item.page_id, {}).setdefault(item.category_title, []).append(item)
    return [PageGroup(first[page].page_title, list(by_category.items()), first[page].mute_url,
                      first[page].page_path)
            for page, by_category in pages.items()]


def _checked_address(email: str | None) -> str:
    try:
        return str(Address(addr_spec=email or ""))
    except (ValueError, IndexError, TypeError) as error:
        raise Unbuildable(f"not a usable address: {email!r}") from error


def presented_for(
    user: UserFacts,
    site: SiteFacts,
    entries: Sequence[NotificationRow],
    *,
    host: Host,
    registry: Registry,
) -> list[Presented]:
    """``entries`` as ``user`` may see them now, in their language: access is checked
    again at send time, and the drain drops what is no longer ``available``."""
    with translating(mail_locale(user, site)):
        return present(host, registry, entries, user)


def build(
    *,
    user: UserFacts,
    site: SiteFacts,
    entries: Sequence[Presented],
    unshown: Sequence[Presented] = (),
    registry: Registry,
    token: str,
    zone: str = "UTC",
    secret: bytes,
) -> NotificationMessage:
    """The mail for one (user, site): ``notification`` for one entry, the digest for
    several, by page then category, newest first. No page content, ever: titles, paths,
    who, excerpts. ``entries`` come from :func:`presented_for`, each one available to its
    reader; ``unshown``, those past :data:`SHOWN` ("and N more", their pages still named
    by the subject). ``token`` is the unsubscribe token; ``secret`` signs each page's mute
    link and keys the thread id; ``zone``: the reader's
    (:func:`wikinotify.preferences.grid.reader_zone`), the times are said in."""
    recipient = _checked_address(user.email)
    locale = mail_locale(user, site)
    with translating(locale) as translations:
        newest_first = sorted(entries, key=lambda p: (p.entry.updated_at, p.entry.id),
                              reverse=True)
        titles = category_titles(registry, newest_first)
        mute_urls = {page: site_url(site, "wikinotify.mute_page",
                                    t=make_mute_token(secret, user.id, page))
                     for page in {p.entry.page_id for p in newest_first} if page is not None}
        items = [_mail_entry(site, titles, mute_urls, p) for p in newest_first]
        more = len(unshown)
        single = len(items) == 1 and not more
        context: dict[str, Any] = {
            "site": site,
            "user": user,
            "reader_zone": zone,
            "reader_locale": locale,  # the times' language (blueprint/reader_time.py)
            "entries": items,
            "pages": grouped(items),
            "more": more,
            # The first line a mail client shows in its list (the HTML's preheader).
            "headline": items[0].text if single else _count(site, len(items) + more),
            "subject": _subject(site, items, unshown,
                                _happened(registry, newest_first[0]) if single else None),
            "lang": locale.replace("_", "-"),  # BCP 47, as <html lang> wants it
            "inbox_url": site_url(site, "wikinotify.inbox_page"),
            "preferences_url": site_url(site, "wikinotify.preferences_page"),
            "unsubscribe_url": site_url(site, "wikinotify.unsubscribe_page", t=token),
            "mute_url": items[0].mute_url if single else None,
        }
        template = "notification" if single else "digest"
        context |= catalogue_callables(translations)
        text = render_template(f"wikinotify/mail/{template}.txt", **context)
        html = render_template(f"wikinotify/mail/{template}.html", **context)
    # The subject is made of titles the wiki's users typed (on one line, as Flask-Mail's
    # check of a message wants; :meth:`NotificationMessage.mime` writes it as text); the
    # headers, of settings.
    thread = _thread(site, user, items[0], secret) if single else {}
    headers = {name: header_safe(value) for name, value in {
        **_headers(context["unsubscribe_url"]), **thread}.items()}
    message = NotificationMessage(
        subject=header_safe(context["subject"]),
        recipients=[recipient],
        body=text,
        html=html,
        extra_headers=headers,
    )
    # The site's own domain, not the worker machine's name (Flask-Mail's default).
    message.msgId = make_msgid(domain=site_domain(site))
    message.list_id = list_id(site)
    message.dkim = state().dkim
    return message


def catalogue_callables(translations: NullTranslations) -> dict[str, Any]:
    """The templates' ``gettext`` and ``ngettext`` for one mail, bound to its locale's
    catalogue (:func:`~wikinotify.catalogue.translating`): those Flask-Babel installs
    look the catalogue up again at every call, through the app context, some forty times
    a digest (a tenth of its build). Made as Jinja makes them for
    ``install_gettext_callables(newstyle=True)``: the same escaping, the same formatting.

    ``_`` is given too, where Jinja's alias would look ``gettext`` up and call it through
    the template's context twice more (three calls a sentence, some forty sentences a
    digest). A sentence said without variables ("Mute this page", once per page of a
    digest in each body) is said once per mail and body kind, then kept."""
    gettext = _make_new_gettext(translations.ugettext)
    return {"gettext": gettext, "_": _kept_gettext(gettext),
            "ngettext": _make_new_ngettext(translations.ungettext)}


def _kept_gettext(gettext: Callable[..., str]) -> Callable[..., str]:
    """``gettext`` (Jinja's newstyle one), its sentences without variables kept: what it
    says depends only on the sentence and on whether the template escapes."""
    kept: dict[tuple[str, bool], str] = {}

    @pass_context
    def said(context: Context, string: str, **variables: Any) -> str:
        if variables:
            return gettext(context, string, **variables)
        key = (string, context.eval_ctx.autoescape)
        text = kept.get(key)
        if text is None:
            text = kept[key] = gettext(context, string)
        return text

    return said


def category_titles(registry: Registry, entries: Sequence[Presented]) -> dict[str, str]:
    """The title of each category of ``entries``, in the current locale: translated once,
    however many entries it has."""
    return {key: gettext(registry[key].title)
            for key in {p.entry.category for p in entries} if key in registry}


def entry_link(site: SiteFacts, presented: Presented) -> str:
    """Where an available entry leads, as an absolute URL on ``site`` (a mail's, a feed's).
    One about no page (a host's own category about the wiki,
    docs/adopting.md#adding-a-kind-of-notification) has no link of its own: it opens the
    inbox."""
    if presented.url is not None:
        return absolute(site, presented.url)
    return site_url(site, "wikinotify.inbox_page")


def _mail_entry(site: SiteFacts, titles: dict[str, str], mute_urls: dict[str, str],
                presented: Presented) -> MailEntry:
    """One entry of the mail, in the current (the recipient's) locale; ``titles``: each
    category's title in it; ``mute_urls``: each page's mute link. Only available entries
    are mailed."""
    return MailEntry(
        category=presented.entry.category,
        category_title=titles[presented.entry.category],
        text=presented.text,
        link=entry_link(site, presented),
        excerpt=presented.excerpt,
        page_id=presented.entry.page_id,
        page_title=(presented.page or {}).get("title") or None,
        page_path=_text((presented.entry.data or {}).get("path")) if presented.page else None,
        at=presented.entry.updated_at,
        mute_url=mute_urls.get(presented.entry.page_id or ""),
        body=presented.body,
    )


def _text(value: object) -> str | None:
    """``value`` if it is a non-empty string (a snapshot is what the wiki sent)."""
    return value if isinstance(value, str) and value else None


def _thread(site: SiteFacts, user: UserFacts, item: MailEntry,
            secret: bytes) -> dict[str, str]:
    """``In-Reply-To`` and ``References`` naming the thread of ``user``'s mails about the
    entry's page, so a mail client shows them as one conversation. Its root is a
    ``Message-ID`` no mail ever had (as GitHub's are): a keyed hash, so the header says
    nothing of the reader or the page. Digests, and an entry about no page, thread by
    nothing."""
    if item.page_id is None:
        return {}
    key = thread_key(secret, user.id, site.id, item.page_id)
    root = f"<page-{key}@{site_domain(site)}>"
    return {"In-Reply-To": root, "References": root}


#: Who did it, after what happened (a mail's subject): one person, two, or the last and how
#: many others.
BY_ONE = N_("%(what)s by %(actor)s")
BY_TWO = N_("%(what)s by %(actor)s and %(other)s")
BY_MANY = Np_("%(what)s by %(actor)s and %(others)s other",
              "%(what)s by %(actor)s and %(others)s others")


def _happened(registry: Registry, presented: Presented) -> str | None:
    """What happened on the page and who did it, as a one-entry mail's subject says it
    after the page's title ("3 edits by Bob Builder and Carol Danvers", "page created by
    Bob Builder", "2 comments by Bob Builder and 2 others"); ``None`` where the entry's
    category has no such words (its sentence is the subject then)."""
    category = registry.get(presented.entry.category)
    if category is None or category.summary is None:
        return None
    what = category.summary(view_of(presented.entry, ""))
    names = actor_names(presented.entry)
    if not names:  # an import, a git pull: nobody to name
        return what
    if len(names) == 1:
        return gettext(BY_ONE, what=what, actor=names[0])
    if len(names) == 2:
        return gettext(BY_TWO, what=what, actor=names[0], other=names[1])
    stored = (presented.entry.data or {}).get(ACTORS)
    # At the cap the entry stopped naming people: "and 49+ others".
    full = isinstance(stored, dict) and len(stored) >= ACTORS_KEPT
    others = len(names) - 1
    return ngettext(*BY_MANY, others, what=what, actor=names[0],
                    others=f"{others}+" if full else str(others))


def _subject(site: SiteFacts, items: Sequence[MailEntry], unshown: Sequence[Presented],
             happened: str | None = None) -> str:
    """The page, then what happened (docs/rules.md#what-a-mail-says): for one entry, the
    page's title and ``happened`` (:func:`_happened`), else its sentence (which names the
    page); for a digest, its pages (newest first: the first by title, the others counted,
    the unshown ones too) and how many notifications. One rule for both: "[Site] Page:
    what"."""
    if len(items) == 1 and not unshown:
        if happened is None or not items[0].page_title:
            return f"[{site.title}] {items[0].text}"
        return f"[{site.title}] " + gettext("%(pages)s: %(notifications)s",
                                            pages=header_safe(items[0].page_title),
                                            notifications=happened)
    total = ngettext("%(num)d notification", "%(num)d notifications", len(items) + len(unshown))
    titles = [i.page_title for i in items] + [(p.page or {}).get("title") for p in unshown]
    pages = list(dict.fromkeys(header_safe(title) for title in titles if title))
    if not pages:
        return f"[{site.title}] {total}"
    if len(pages) == 1:
        about = pages[0]
    else:
        about = ngettext("%(page)s and %(num)d other page", "%(page)s and %(num)d other pages",
                         len(pages) - 1, page=pages[0])
    return f"[{site.title}] " + gettext("%(pages)s: %(notifications)s", pages=about,
                                        notifications=total)


def _count(site: SiteFacts, total: int) -> str:
    """A digest's first line: how many notifications, from which site."""
    return ngettext("%(num)d notification from %(site)s",
                    "%(num)d notifications from %(site)s", total, site=site.title)


def _headers(unsubscribe_url: str) -> dict[str, str]:
    """RFC 8058 one-click unsubscribe (the POST goes to the same https URL), and RFC 3834's
    ``Auto-Submitted`` so out-of-office replies are not sent back to the wiki."""
    targets = [f"<{unsubscribe_url}>"]
    mailto = config("UNSUBSCRIBE_MAILTO")
    if mailto:
        targets.append(f"<mailto:{mailto}?subject=unsubscribe>")
    return {
        "List-Unsubscribe": ", ".join(targets),
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        "Auto-Submitted": "auto-generated",
    }
