"""Refusals a reader understands: every reason the code gives for refusing a field (marshmallow's
messages, the schemas' own, the SSRF guard's and the chat targets' reasons) as a sentence in
the page's language (docs/languages.md#refusals).

The API keeps its English ``{"error": {"code", "message", "fields"}}``: a client matches on it.
A page reads the same ``ValidationError`` through :func:`refusals`, which finds the template
each English message was made from (:data:`SENTENCES`), and says it through the catalogue with
the values the message carried. A message no template matches is shown as
:data:`UNKNOWN_REASON`; tests/test_refusals.py holds every reason the code can give to a
sentence, so a new one without its translation fails there.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from flask_babel import gettext
from marshmallow import ValidationError

from .categories.base import N_
from .outbound import chat_targets, push, ssrf
from .schemas import flatten_messages


@dataclass(frozen=True)
class Sentence:
    """What a page says for one English reason: ``text`` (a catalogue msgid, its
    placeholders named as the template's), and ``for_a_list`` where a list field needs
    other words (marshmallow's Length says the same of a string and of a list)."""

    text: str
    for_a_list: str | None = None


LENGTH_BETWEEN = "Length must be between {min} and {max}."
LENGTH_AT_MOST = "Longer than maximum length {max}."

#: The English templates (``str.format``) the code writes refusals from, and their sentences.
#: marshmallow's own messages (fields and validators, as marshmallow 4 writes them) first.
SENTENCES: dict[str, Sentence] = {
    "Missing data for required field.": Sentence(N_("Fill this in."),
                                                 N_("Choose at least one.")),
    "Field may not be null.": Sentence(N_("Fill this in."), N_("Choose at least one.")),
    "Invalid value.": Sentence(N_("This value is not accepted.")),
    "Not a valid string.": Sentence(N_("Enter text here.")),
    "Not a valid utf-8 string.": Sentence(N_("Enter text here.")),
    "Not a valid integer.": Sentence(N_("Enter a whole number.")),
    "Not a valid number.": Sentence(N_("Enter a whole number.")),
    "Number too large.": Sentence(N_("Enter a smaller number.")),
    "Not a valid boolean.": Sentence(N_("Choose yes or no.")),
    "Not a valid list.": Sentence(N_("Choose from the options offered.")),
    "Invalid type.": Sentence(N_("This is not the kind of value this field takes.")),
    "Invalid input type.": Sentence(N_("This is not the kind of value this field takes.")),
    "Not a valid mapping type.": Sentence(N_("This is not the kind of value this field takes.")),
    "Unknown field.": Sentence(N_("This form has no such field.")),
    "Must be greater than or equal to {min} and less than or equal to {max}.": Sentence(
        N_("Enter a whole number from %(min)s to %(max)s.")),
    "Must be greater than or equal to {min}.": Sentence(N_("Enter %(min)s or more.")),
    "Must be less than or equal to {max}.": Sentence(N_("Enter %(max)s or less.")),
    LENGTH_BETWEEN: Sentence(
        N_("Enter from %(min)s to %(max)s characters."),
        N_("Choose at least %(min)s and at most %(max)s.")),
    "Shorter than minimum length {min}.": Sentence(
        N_("Enter at least %(min)s characters."), N_("Choose at least %(min)s.")),
    LENGTH_AT_MOST: Sentence(
        N_("Enter at most %(max)s characters."), N_("Choose at most %(max)s.")),
    "Length must be {equal}.": Sentence(
        N_("Enter exactly %(equal)s characters."), N_("Choose exactly %(equal)s.")),
    "Must be one of: {choices}.": Sentence(N_("Choose one of the options offered.")),
    # wikinotify's field types and checks.
    "Must be true or false.": Sentence(N_("Choose yes or no.")),
    "Not a known IANA time zone name.": Sentence(N_("Choose a time zone from the list.")),
    "The body must be a JSON object.": Sentence(N_("Nothing could be read from this form.")),
    "The body is not valid JSON.": Sentence(N_("Nothing could be read from this form.")),
    "No site has this id.": Sentence(N_("There is no such site.")),
    "This site is listed more than once.": Sentence(N_("This site is listed more than once.")),
    "Only a site-wide webhook listens to one site.": Sentence(
        N_("Only a site-wide webhook can listen to a single site.")),
    "Must be at least {days} while anyone has an email digest.": Sentence(
        N_("Keep notifications at least %(days)s days while anyone receives an email digest.")),
    "Not a cursor this API gave out.": Sentence(N_("This link to older entries is not valid.")),
    "No category this endpoint may be told of has the key {key}.": Sentence(
        N_("Choose categories from the list.")),
    "Choose at least one category.": Sentence(N_("Choose at least one category.")),
    "This URL is refused: {reason}.": Sentence(N_("This URL is refused: %(reason)s.")),
    "This chat URL is refused: {reason}.": Sentence(N_("This chat URL is refused: %(reason)s.")),
    "This push endpoint is refused: {reason}.": Sentence(
        N_("This push endpoint is refused: %(reason)s.")),
    "Not a browser's {name} key ({size} bytes).": Sentence(
        N_("This is not a key a browser gives (%(size)s bytes).")),
    "Not base64url.": Sentence(N_("This is not a key a browser gives.")),
    # The push guard's reasons (wikinotify.outbound.push), said after "refused:".
    push.NOT_A_PUSH_URL: Sentence(N_("it is not a push service URL")),
    push.HTTPS_ONLY: Sentence(N_("a push service is reached over https only")),
    push.UNKNOWN_SERVICE: Sentence(
        N_("%(hostname)s is not a push service this wiki knows; an administrator can add it")),
    # The SSRF guard's reasons (wikinotify.outbound.ssrf), said after "refused:".
    ssrf.NOT_A_URL: Sentence(N_("it is not a valid URL")),
    ssrf.SCHEME_REFUSED: Sentence(N_("it must start with http:// or https://")),
    ssrf.NO_HOST: Sentence(N_("it names no server")),
    ssrf.CREDENTIALS: Sentence(N_("it may not contain a user name or a password")),
    ssrf.NOT_A_HOST_NAME: Sentence(N_("%(name)s is not a valid server name")),
    ssrf.NOT_PUBLIC_ADDRESS: Sentence(
        N_("it leads to %(kind)s (%(address)s), where the wiki sends nothing")),
    ssrf.UNRESOLVED_IN_TIME: Sentence(N_("no server named %(hostname)s was found in time")),
    ssrf.UNRESOLVED: Sentence(N_("no server named %(hostname)s was found")),
    # The chat targets' reasons (wikinotify.outbound.chat_targets).
    chat_targets.NO_APPRISE: Sentence(
        N_("the server cannot send chat messages yet; ask the wiki's administrator")),
    chat_targets.NOT_GIVEN: Sentence(
        N_("enter an Apprise URL, such as ntfy://ntfy.sh/my-topic")),
    chat_targets.NOT_APPRISE: Sentence(N_("this is not a URL Apprise can send to")),
    chat_targets.NOT_A_CHAT_SERVICE: Sentence(
        N_("%(scheme)s is not a chat service the wiki can send to")),
    chat_targets.GENERIC: Sentence(
        N_("%(scheme)s:// posts to any address; add a webhook instead, which is verified "
           "before anything is sent to it")),
    chat_targets.PARAMETER_REFUSED: Sentence(
        N_("the parameter %(name)s= is not accepted: %(reason)s")),
    chat_targets.OWN_FIELDS: Sentence(
        N_("a chat URL may not add headers, payload or query fields of its own")),
    chat_targets.SHAPING: Sentence(N_("how messages are sent is for the wiki to decide")),
    chat_targets.UNSAFE_PARAMETER: Sentence(
        N_("for %(service)s, only parameters that cannot name a file or an address are "
           "accepted")),
}

#: Where marshmallow's Length fits its minimum badly, by that minimum: "between 0 and 255"
#: reads as "at most 255", "between 1 and 100" as "fill this in" or "at least one".
LENGTH_FROM: dict[str, Sentence] = {
    "0": SENTENCES[LENGTH_AT_MOST],
    "1": Sentence(N_("Fill this in, with at most %(max)s characters."),
                  N_("Choose at least one and at most %(max)s.")),
}

#: The kinds of address the SSRF guard names (:data:`wikinotify.outbound.ssrf.NOT_PUBLIC`).
ADDRESS_KINDS: dict[str, str] = {
    "an unspecified": N_("an unspecified address"),
    "a 'this network'": N_("a “this network” address"),
    "a private": N_("a private address"),
    "a shared (carrier-grade NAT)": N_("a shared address (carrier-grade NAT)"),
    "a loopback": N_("a loopback address"),
    "a link-local": N_("a link-local address"),
    "an IETF protocol assignment": N_("an address reserved for IETF protocols"),
    "a documentation": N_("an address reserved for documentation"),
    "an AS112 DNS sink": N_("an AS112 DNS sink"),
    "an AMT relay": N_("an AMT relay"),
    "a deprecated 6to4 relay": N_("a deprecated 6to4 relay"),
    "a benchmarking": N_("an address reserved for benchmarks"),
    "a multicast": N_("a multicast address"),
    "a reserved": N_("a reserved address"),
    "a local-use translation": N_("a local translation address"),
    "a discard-only": N_("a discard-only address"),
    "a Teredo": N_("a Teredo tunnel address"),
    "a site-local": N_("a site-local address"),
    ssrf.NON_PUBLIC: N_("a non-public address"),
}

#: Said for a reason no template matches (a test keeps this from happening).
UNKNOWN_REASON = N_("This value is not accepted.")

#: What a page calls each field a reason may name, by the field's name in the API.
LABELS: dict[str, str] = {
    "url": N_("URL"),
    "description": N_("Description"),
    "categories": N_("Categories"),
    "scope": N_("Scope"),
    "siteId": N_("Site"),
    "cadence": N_("Send email"),
    "weekday": N_("Day (weekly)"),
    "hour": N_("Hour (daily and weekly)"),
    "timezone": N_("Time zone"),
    "emailSchedule": N_("Email delivery"),
    "retentionDays": N_("Keep notifications for (days)"),
    "emailDelaySeconds": N_("Email delay (seconds)"),
    "mailBatchSize": N_("Mail batch size"),
    "sites": N_("Notifications on each site"),
    "kind": N_("What to mute"),
    "id": N_("What to mute"),
    "category": N_("Category"),
    "pageId": N_("Page"),
    "cursor": N_("Older"),
    "body": N_("The form"),
    "_schema": N_("The form"),
}

#: Fields a page shows as a list of choices (Length counts choices, not characters), and
#: what each says when none is chosen, where "at least one" wants its noun.
LIST_FIELDS: dict[str, str | None] = {
    "categories": N_("Choose at least one category."),
    "sites": None,
}


@dataclass(frozen=True)
class Refusal:
    """One field's refusal as a page shows it: ``field`` is the form's name for it (the API
    path's first part, ``categories`` for ``categories.3``), ``label`` and ``sentence`` are
    in the page's language."""

    field: str
    label: str
    sentence: str


def refusals(invalid: ValidationError, labels: Mapping[str, str] | None = None) -> list[Refusal]:
    """Each refused field of ``invalid`` once, with its first reason, as a sentence.
    ``labels`` names a page's fields where it words them otherwise (msgids)."""
    shown: dict[str, Refusal] = {}
    for path, messages in flatten_messages(invalid.messages).items():
        field = field_of(path)
        if field not in shown:
            label = (labels or {}).get(field) or LABELS.get(field)
            shown[field] = Refusal(field, gettext(label) if label else field,
                                   sentence(messages[0], list_field=field in LIST_FIELDS,
                                            none_chosen=LIST_FIELDS.get(field)))
    return list(shown.values())


def field_of(path: str) -> str:
    """The form field an API path names: ``emailSchedule.hour`` is the schedule form's
    ``hour``, ``categories.3`` and ``sites.0.id`` are ``categories`` and ``sites``."""
    parts = [part for part in path.split(".") if not part.isdigit()]
    if len(parts) > 1 and parts[0] == "emailSchedule":
        parts = parts[1:]
    return parts[0] if parts else "_schema"


def sentence(message: str, *, list_field: bool = False, none_chosen: str | None = None) -> str:
    """``message`` (English, as the code wrote it) as a sentence in the page's language;
    of a list field, ``none_chosen`` says that at least one is wanted."""
    found = match(message)
    if found is None:
        return gettext(UNKNOWN_REASON)
    said, values = found
    if said is SENTENCES[LENGTH_BETWEEN] and values["min"] in LENGTH_FROM:
        if values["min"] == "1" and list_field and none_chosen:
            return gettext(none_chosen)
        said = LENGTH_FROM[values["min"]]
    text = said.for_a_list if list_field and said.for_a_list else said.text
    return gettext(text, **values) if values else gettext(text)


def match(message: str) -> tuple[Sentence, dict[str, str]] | None:
    """The sentence for ``message`` and the values it carried, each already in the page's
    language where it is itself a reason or a kind of address; ``None`` if none matches."""
    for template, pattern in _patterns():
        found = pattern.fullmatch(message)
        if found is not None:
            return SENTENCES[template], {
                name: _shown(name, value) for name, value in found.groupdict().items()}
    return None


def _shown(name: str, value: str) -> str:
    if name == "reason":
        return sentence(value)
    if name == "kind" and value in ADDRESS_KINDS:
        return gettext(ADDRESS_KINDS[value])
    return value


@cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Each template as a pattern, the most literal first: "Must be greater than or equal
    to {min} and less than or equal to {max}." is tried before "Must be greater than or equal
    to {min}.", which would read the rest of it as ``min``."""
    compiled = []
    for template in SENTENCES:
        pieces, literal_length = [], 0
        for literal, name, _spec, _conversion in string.Formatter().parse(template):
            pieces.append(re.escape(literal))
            literal_length += len(literal)
            if name is not None:
                pieces.append(f"(?P<{name}>.+?)")
        compiled.append((literal_length, template, re.compile("".join(pieces), re.DOTALL)))
    compiled.sort(key=lambda item: -item[0])
    return tuple((template, pattern) for _length, template, pattern in compiled)


def said(invalid: ValidationError, labels: Mapping[str, str] | None = None) -> str:
    """Every refusal of ``invalid`` in one line, for an answer with no form to mark (the
    wiki's own 400 page): "Page: enter from 1 to 64 characters." """
    return " ".join(
        gettext("%(label)s: %(value)s", label=r.label, value=r.sentence)
        for r in refusals(invalid, labels))
