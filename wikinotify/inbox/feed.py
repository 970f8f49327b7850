"""A reader's inbox as an Atom feed (RFC 4287, docs/rules.md#the-feed), read by a feed
reader that has no session: the URL carries a signed token naming her and her link's
version (:class:`~wikinotify.models.FeedKey`), and resetting the link makes a new version,
so every older token stops working.

What it lists is what her inbox would show her now: the same query
(:func:`~wikinotify.inbox.entries.list_entries`) and the same access check
(:func:`~wikinotify.inbox.presentation.present`), every time the feed is read. An entry
about a page she can no longer see is left out whole: a feed reader keeps what it fetched,
and nothing of that page may reach it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from flask_babel import force_locale, gettext
from itsdangerous import BadData, URLSafeSerializer
from sqlalchemy.orm import Session

from .. import dialects
from ..announcements import withdrawn_entries
from ..categories import Registry
from ..host import Host, SiteFacts, UserFacts
from ..instance_settings import site_enabled
from ..mail.compose import category_titles, entry_link, mail_locale, site_url
from ..models import FeedKey, utcnow
from .entries import list_entries
from .presentation import Presented, present

#: Its own salt: an unsubscribe token (signed with the same instance secret) is not a feed
#: token, nor the other way round.
SALT = "wikinotify.feed"
#: The newest entries a feed lists.
LENGTH = 50
ATOM = "http://www.w3.org/2005/Atom"
#: What the route answers with.
CONTENT_TYPE = "application/atom+xml; charset=utf-8"
#: The route's endpoint, for the links to it.
ENDPOINT = "wikinotify.feed_atom"

#: What XML 1.0 cannot carry at all, escaped or not (a title may hold anything its
#: author typed): dropped from every text.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class BadToken(ValueError):
    """Not a token of a feed that exists; says nothing about which part failed."""


@dataclass(frozen=True)
class Feed:
    """One reading of a feed: its XML and when it last changed (``Last-Modified``)."""

    body: bytes
    updated: datetime


def _serializer(secret: bytes) -> URLSafeSerializer:
    return URLSafeSerializer(secret, salt=SALT, signer_kwargs={"digest_method": hashlib.sha256})


def _version(session: Session, user_id: str) -> str | None:
    return session.scalar(sa.select(FeedKey.version).where(FeedKey.user_id == user_id))


def token_for(session: Session, secret: bytes, user_id: str) -> str:
    """The user's feed token, her link's version made on first use (an upsert: two tabs
    of the preferences page may race). In the caller's transaction: no commit.

    A read first, so that showing a link that exists writes nothing (on SQLite an INSERT
    takes the database's one write lock even when it conflicts)."""
    version = _version(session, user_id)
    if version is None:
        session.execute(
            dialects.insert(session, FeedKey)
            .values(user_id=user_id, version=secrets.token_urlsafe(16), updated_at=utcnow())
            .on_conflict_do_nothing(index_elements=["user_id"])
        )
        version = _version(session, user_id)
        assert version is not None  # written just above, or by the tab that won
    return _token(secret, user_id, version)


def existing_token(session: Session, secret: bytes, user_id: str) -> str | None:
    """The user's feed token if she has a link already, else ``None``: a page that only
    points at her feed (``<link rel="alternate">``) makes none."""
    version = _version(session, user_id)
    return None if version is None else _token(secret, user_id, version)


def _token(secret: bytes, user_id: str, version: str) -> str:
    return _serializer(secret).dumps({"u": user_id, "k": version})


def reset(session: Session, user_id: str) -> None:
    """A new version for the user's link: every token made before stops working."""
    values = {"version": secrets.token_urlsafe(16), "updated_at": utcnow()}
    session.execute(
        dialects.insert(session, FeedKey)
        .values(user_id=user_id, **values)
        .on_conflict_do_update(index_elements=["user_id"], set_=values)
    )


def reader_of(session: Session, secret: bytes, token: str) -> str:
    """The user id a token names while it is her link's current one; :class:`BadToken`
    for anything else (itsdangerous compares signatures in constant time)."""
    try:
        payload = _serializer(secret).loads(token)
    except BadData:
        raise BadToken() from None
    if not (isinstance(payload, dict) and isinstance(payload.get("u"), str)
            and isinstance(payload.get("k"), str)):
        raise BadToken()
    user_id: str = payload["u"]
    version = _version(session, user_id)
    if version is None or not secrets.compare_digest(version, payload["k"]):
        raise BadToken()
    return user_id


def url(site: SiteFacts, token: str) -> str:
    """The feed's absolute URL on ``site`` (as a mail's links are made)."""
    return site_url(site, ENDPOINT, token=token)


def read(
    session: Session, host: Host, registry: Registry, user: UserFacts, site: SiteFacts,
    token: str,
) -> Feed:
    """The feed of ``user`` as she may see it now on ``site``, in her language (a mail's:
    hers, else the site's). A site whose notifications are switched off lists nothing, as
    its inbox shows nothing."""
    entries: Sequence[Presented] = ()
    with force_locale(mail_locale(user, site)):
        if site_enabled(session, site.id):
            rows = list_entries(session, user.id, site.id, limit=LENGTH).entries
            gone = withdrawn_entries(session, rows)
            rows = [e for e in rows if e.id not in gone]
            entries = [p for p in present(host, registry, rows, user) if p.available]
        since = session.scalar(sa.select(FeedKey.updated_at).where(FeedKey.user_id == user.id))
        updated = max([p.entry.updated_at for p in entries] + [since or utcnow()])
        root = _feed(user, site, token, updated)
        titles = category_titles(registry, entries)
        root.extend(_entry(site, titles, p) for p in entries)
    body = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return Feed(body, updated)


def _element(parent: ET.Element, tag: str, text: str | None = None,
             **attributes: str) -> ET.Element:
    """A child of ``parent``; ElementTree escapes its text and attributes."""
    child = ET.SubElement(parent, tag,
                          {name: _NOT_XML.sub("", v) for name, v in attributes.items()})
    if text is not None:
        child.text = _NOT_XML.sub("", text)
    return child


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def _urn(site: SiteFacts, name: str) -> str:
    """A stable id, the same at every reading and across resets of the link, that says
    nothing but which site and which row."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{site.base_url}#wikinotify/{name}").urn


def _feed(user: UserFacts, site: SiteFacts, token: str, updated: datetime) -> ET.Element:
    # Atom's namespace as the default one, written as an attribute: ElementTree's own
    # ``default_namespace`` refuses attributes without a namespace (``href``, ``rel``).
    root = ET.Element("feed", xmlns=ATOM)
    root.set("{http://www.w3.org/XML/1998/namespace}lang", mail_locale(user, site))
    _element(root, "id", _urn(site, f"feed/{user.id}"))
    _element(root, "title", gettext("Notifications for %(name)s on %(site)s",
                                     name=user.display_name, site=site.title))
    _element(root, "updated", _when(updated))
    author = _element(root, "author")
    _element(author, "name", site.title)
    _element(author, "uri", site.base_url)
    _element(root, "link", rel="self", type="application/atom+xml", href=url(site, token))
    _element(root, "link", rel="alternate", type="text/html",
             href=site_url(site, "wikinotify.inbox_page"))
    _element(root, "generator", "wikinotify")
    return root


def _entry(site: SiteFacts, titles: dict[str, str], presented: Presented) -> ET.Element:
    row = presented.entry
    entry = ET.Element("entry")
    _element(entry, "id", _urn(site, f"entry/{row.id}"))
    _element(entry, "title", presented.text)
    _element(entry, "link", rel="alternate", type="text/html", href=entry_link(site, presented))
    _element(entry, "updated", _when(row.updated_at))
    _element(entry, "published", _when(row.created_at))
    if row.category in titles:
        _element(entry, "category", term=row.category, label=titles[row.category])
    if presented.actor and presented.actor.get("name"):
        _element(_element(entry, "author"), "name", str(presented.actor["name"]))
    if presented.excerpt:
        _element(entry, "summary", presented.excerpt)
    return entry
