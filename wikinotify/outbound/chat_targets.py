"""What a chat target's Apprise URL may say (docs/channels.md#chat): the rules
:func:`wikinotify.outbound.chat.service` applies when a target is saved and again before
every message, so that a target stored before a rule existed is held to it too.

- **Only services Apprise reaches over HTTP through requests**, whose every lookup and
  answer the SSRF guard sees (:func:`speaks_http`).
- **No generic target** (:data:`GENERIC_PLUGINS`): ``json://``, ``xml://``, ``form://``
  post anywhere, as the URL says; a webhook, verified by a challenge first, is the way to
  reach an address of one's own.
- **Query parameters from an allow-list, not a deny-list** (:func:`check`).
  Apprise reads dozens of parameters across a hundred plugins, new ones with each release,
  and some name local files (``template=``, ``keyfile=``, ``subfile=``, ``pgpprv=``…) that
  the worker would open, and whose existence and content its warnings would then tell the
  deliveries page. A list of what is dangerous would miss the next one; a list of what is
  safe fails closed. A parameter is taken when the service declares it and its value
  cannot name a file, a header or an address: a typed value (:data:`TYPED`), another
  spelling of a part of the URL's path (``token=``) or of its recipients (``to=``,
  ``channel=``), or one of the
  few free-text parameters read and listed in :data:`TEXT_PARAMETERS`. Never: a header,
  payload field or query parameter of the URL's own (``+X-Header=``, ``-field=``,
  ``:field=``), nor what decides how requests are made (:data:`REQUEST_SHAPING`).
"""

from __future__ import annotations

import re
import sys
from typing import Any


class InvalidChatTarget(ValueError):
    """Not an Apprise URL this installation can send to; the message says why."""


#: Every reason a chat target is refused, as a ``str.format`` template (as the SSRF guard's:
#: wikinotify/refusals.py puts each in the reader's language; a test holds it to this list).
NO_APPRISE = "chat needs Apprise on the server: pip install 'wikinotify[chat]'"
NOT_GIVEN = "give an Apprise URL, such as ntfy://ntfy.sh/my-topic"
NOT_APPRISE = "this is not a URL Apprise can send to"
NOT_A_CHAT_SERVICE = "{scheme} is not a chat service wikinotify can send to"
GENERIC = ("{scheme}:// posts to any address, with the method, headers and fields its URL "
           "names, to a receiver that never agreed to it; add a webhook instead, which is "
           "verified by a challenge before anything else is sent to it")
PARAMETER_REFUSED = "{name}= is not accepted: {reason}"
OWN_FIELDS = "a chat URL may not add headers, payload or query fields of its own"
SHAPING = "how messages are sent (method, timeouts, retries, redirects) is the wiki's"
UNSAFE_PARAMETER = ("for {service}, wikinotify takes only the parameters that "
                    "cannot name a file or an address")
REASONS = (NO_APPRISE, NOT_GIVEN, NOT_APPRISE, NOT_A_CHAT_SERVICE, GENERIC, PARAMETER_REFUSED,
           OWN_FIELDS, SHAPING, UNSAFE_PARAMETER)


#: Apprise's generic plugins (``json``, ``xml``, ``form`` and their TLS forms, all in
#: ``custom_*`` modules): they post to any URL with whatever method, headers and payload
#: its parameters ask for, so one saved target could aim the wiki's traffic at anyone.
#: Refused by module, so that a generic plugin Apprise adds later is refused too.
GENERIC_PLUGINS = "apprise.plugins.custom_"

#: Parameter prefixes by which Apprise's URLs add request headers (``+``), payload or
#: query fields (``-``, ``:``) of their own.
CUSTOM_PREFIXES = ("+", "-", ":")

#: Parameters that decide how requests are made rather than what is said: the wiki's
#: settings decide these (one attempt a run, its timeouts, no redirect, nothing stored).
REQUEST_SHAPING = frozenset({"method", "redirect", "retry", "wait", "cto", "rto", "store"})

#: Apprise's token for whom a message is for (chats, channels, users, topics), which every
#: plugin also takes as ``to=`` and some only as a parameter (``mmost://…?channel=``).
RECIPIENTS = "targets"

#: Value types Apprise declares that cannot name a file, a header or an address.
TYPED = ("bool", "int", "float", "choice:")

#: Free-text parameters read in Apprise's plugins and found to carry only what the service
#: is told (a link it shows, an avatar's URL its own servers fetch, a thread to post in),
#: by plugin class. Any other free-text parameter is refused until it is read and added.
TEXT_PARAMETERS: dict[str, frozenset[str]] = {
    "NotifyNtfy": frozenset({"click", "email", "avatar_url", "delay", "xtags"}),
    "NotifyDiscord": frozenset({"avatar_url", "href", "thread", "ping"}),
    "NotifyMattermost": frozenset({"icon_url"}),
    "NotifyPushover": frozenset({"sound", "url", "url_title"}),
}


def check(plugin: Any, url: str) -> None:
    """:class:`InvalidChatTarget` unless ``plugin`` (Apprise's for ``url``) is a service
    wikinotify sends to, through a URL that says only what a chat message needs."""
    scheme = url.split(":", 1)[0].lower()
    if not speaks_http(plugin):
        raise InvalidChatTarget(NOT_A_CHAT_SERVICE.format(scheme=scheme))
    if type(plugin).__module__.startswith(GENERIC_PLUGINS):
        raise InvalidChatTarget(GENERIC.format(scheme=scheme))
    for name in _query(url):
        reason = _refused(type(plugin), name)
        if reason is not None:
            raise InvalidChatTarget(PARAMETER_REFUSED.format(name=name, reason=reason))


def speaks_http(plugin: Any) -> bool:
    """Whether ``plugin`` talks to its service through requests, whose every lookup and
    answer the guard sees. The rest (syslog over UDP, XMPP, MQTT, SMTP, desktop popups)
    open their own sockets, some resolving names where the guard cannot look, so they are
    refused rather than half guarded."""
    import requests

    return any(getattr(sys.modules.get(cls.__module__), "requests", None) is requests
               for cls in type(plugin).__mro__)


def _query(url: str) -> list[str]:
    """The names of ``url``'s query parameters as Apprise's own parser reads them: lower
    case, but a header's or field's (``+X-Header``) as written, with its prefix."""
    from apprise.utils.parse import parse_url

    parsed = parse_url(url, verify_host=False) or {}  # type: ignore[no-untyped-call]
    names = [prefix + name for prefix in CUSTOM_PREFIXES
             for name in parsed.get(f"qsd{prefix}") or {}]
    return names + [name for name in parsed.get("qsd") or {}
                    if not name.startswith(CUSTOM_PREFIXES)]


def _refused(plugin: Any, name: str) -> str | None:
    """Why the query parameter ``name`` is refused in a URL for ``plugin``, or ``None``."""
    if name.startswith(CUSTOM_PREFIXES):
        return OWN_FIELDS
    if name in REQUEST_SHAPING:
        return SHAPING
    if not _safe(plugin, name, set()):
        return UNSAFE_PARAMETER.format(service=plugin.service_name)
    return None


def _safe(plugin: Any, name: str, seen: set[str]) -> bool:
    spec = plugin.template_args.get(name)
    if spec is None or name in seen:
        return False
    seen.add(name)
    alias = spec.get("alias_of")
    if alias is not None:
        names = (alias,) if isinstance(alias, str) else tuple(alias)
        path = _path_tokens(plugin)
        return all(n in path or n == RECIPIENTS or (n != name and _safe(plugin, n, seen))
                   for n in names)
    kind = str(spec.get("type", ""))
    return kind.startswith(TYPED) or name in TEXT_PARAMETERS.get(plugin.__name__, ())


def _path_tokens(plugin: Any) -> set[str]:
    """The tokens Apprise's own URL templates for ``plugin`` put before the query: parts
    of a URL's path, which a parameter may spell differently. A token only its templates'
    queries name (FCM's ``?keyfile={keyfile}``) is not one."""
    return {token for template in plugin.templates
            for token in re.findall(r"{(\w+)}", template.split("?", 1)[0])}
