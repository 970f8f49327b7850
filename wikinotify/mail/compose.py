"""Notification mail (§10.1): one entry or a digest, text and HTML bodies, in the
recipient's language, with the RFC 8058 headers on every message."""

from __future__ import annotations

import email.policy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.headerregistry import Address
from typing import Any
from urllib.parse import urlsplit

from flask import current_app, render_template
from flask_babel import force_locale, gettext, ngettext
from flask_mail import Message

from ..categories import Registry
from ..config import config
from ..host import Host, SiteFacts, UserFacts
from ..i18n import SOURCE_LANGUAGE
from ..models import Notification
from ..presentation import Presented, present
from ..state import state
from .signing import DkimKey

#: A mail shows at most this many entries; the rest are "and N more" (§10.3).
SHOWN = 50

#: What a header value must not carry: a CR or LF would end the header (Flask-Mail
#: refuses such a mail at send time), and the other controls and Unicode's line and
#: paragraph separators garble it in mail clients.
_CONTROLS = re.compile(r"\s*[\x00-\x1f\x7f-\x9f\u2028\u2029]+\s*")


def header_safe(value: str) -> str:
    """``value`` on one line: each run of control characters, with the spaces around
    it, folded to one space."""
    return _CONTROLS.sub(" ", value).strip()


class NotificationMessage(Message):
    """A Flask-Mail message, DKIM-signed on its way out when the wiki configured a key."""

    dkim: DkimKey | None = None

    def as_bytes(self) -> bytes:
        message = self._message()
        # The List-Unsubscribe URL is longer than 78 characters with nowhere to fold; at
        # the default limit the generator RFC 2047-encodes it, and mail clients then do
        # not read it as <URL>. RFC 5322's hard limit is 998.
        message.policy = email.policy.SMTP.clone(max_line_length=998)
        raw = message.as_bytes()
        return raw if self.dkim is None else self.dkim.sign(raw) + raw


class Unbuildable(ValueError):
    """A message that cannot be built (a malformed address): no retry will fix it."""


def site_url(site: SiteFacts, endpoint: str, **values: Any) -> str:
    """An absolute URL of one of the app's routes on ``site`` (workers have no request)."""
    parts = urlsplit(site.base_url)
    adapter = current_app.url_map.bind(
        parts.netloc, script_name=parts.path or "/", url_scheme=parts.scheme
    )
    return adapter.build(endpoint, values, force_external=True)


def absolute(site: SiteFacts, path: str) -> str:
    return site.base_url.rstrip("/") + "/" + path.lstrip("/")


def mail_locale(user: UserFacts, site: SiteFacts) -> str:
    """The recipient's language, else the site's primary one (§10.1)."""
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


@dataclass(frozen=True)
class PageGroup:
    """A digest's entries about one page, by category; ``title`` ``None`` for those
    about no page."""

    title: str | None
    categories: list[tuple[str, list[MailEntry]]]


def grouped(items: Sequence[MailEntry]) -> list[PageGroup]:
    """``items`` (newest first) by page, then by category: each page, and each category
    within it, where its newest entry comes, so the digest still reads newest first."""
    pages: dict[str | None, dict[str, list[MailEntry]]] = {}
    titles: dict[str | None, str | None] = {}
    for item in items:
        titles.setdefault(item.page_id, item.page_title)
        pages.setdefault(item.page_id, {}).setdefault(item.category_title, []).append(item)
    return [PageGroup(titles[page], list(by_category.items()))
            for page, by_category in pages.items()]


def _checked_address(email: str | None) -> str:
    try:
        return str(Address(addr_spec=email or ""))
    except (ValueError, IndexError, TypeError) as error:
        raise Unbuildable(f"not a usable address: {email!r}") from error


def presented_for(
    user: UserFacts,
    site: SiteFacts,
    entries: Sequence[Notification],
    *,
    host: Host,
    registry: Registry,
) -> list[Presented]:
    """``entries`` as ``user`` may see them now, in their language: access is checked
    again at send time, and the drain drops what is no longer ``available``."""
    with force_locale(mail_locale(user, site)):
        return present(host, registry, entries, user)


def build(
    *,
    user: UserFacts,
    site: SiteFacts,
    entries: Sequence[Presented],
    more: int,
    registry: Registry,
    token: str,
) -> Message:
    """The mail for one (user, site): ``notification`` for one entry, the digest for
    several, by page then category, newest first. No page content, ever: titles, paths,
    who, excerpts. ``entries`` come from :func:`presented_for`, each one available to its
    reader."""
    recipient = _checked_address(user.email)
    with force_locale(mail_locale(user, site)):
        newest_first = sorted(entries, key=lambda p: (p.entry.updated_at, p.entry.id),
                              reverse=True)
        items = [_mail_entry(site, registry, p) for p in newest_first]
        context: dict[str, Any] = {
            "site": site,
            "user": user,
            "entries": items,
            "pages": grouped(items),
            "more": more,
            "inbox_url": site_url(site, "wikinotify.inbox_page"),
            "preferences_url": site_url(site, "wikinotify.preferences_page"),
            "unsubscribe_url": site_url(site, "wikinotify.unsubscribe_page", t=token),
        }
        template = "notification" if len(items) == 1 and not more else "digest"
        subject = _subject(site, items, more)
        text = render_template(f"wikinotify/mail/{template}.txt", **context)
        html = render_template(f"wikinotify/mail/{template}.html", **context)
    # The subject is made of titles the wiki's users typed; the headers, of settings.
    headers = {name: header_safe(value) for name, value in _headers(
        context["unsubscribe_url"]).items()}
    message = NotificationMessage(
        subject=header_safe(subject),
        recipients=[recipient],
        body=text,
        html=html,
        extra_headers=headers,
    )
    message.dkim = state().dkim
    return message


def _mail_entry(site: SiteFacts, registry: Registry, presented: Presented) -> MailEntry:
    """One entry of the mail, in the current (the recipient's) locale."""
    # Only available entries are mailed. One about no page (a host's own category about
    # the wiki, §13) has no link of its own: it opens the inbox.
    link = (
        absolute(site, presented.url)
        if presented.url is not None
        else site_url(site, "wikinotify.inbox_page")
    )
    return MailEntry(
        category=presented.entry.category,
        category_title=gettext(registry[presented.entry.category].title),
        text=presented.text,
        link=link,
        excerpt=presented.excerpt,
        page_id=presented.entry.page_id,
        page_title=(presented.page or {}).get("title") or None,
    )


def _subject(site: SiteFacts, items: Sequence[MailEntry], more: int) -> str:
    if len(items) == 1 and not more:
        return f"[{site.title}] {items[0].text}"
    total = len(items) + more
    return f"[{site.title}] " + ngettext(
        "%(num)d notification", "%(num)d notifications", total
    )


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
