"""Refusals a reader understands (docs/languages.md#refusals): every reason the code can give
for refusing a field has a sentence, translated in every catalogue; a page says it in the
reader's language beside the field and in the summary, never marshmallow's English; the API
keeps its English message."""

from __future__ import annotations

import ast
import string
from pathlib import Path

import pytest
from marshmallow import Schema, fields, validate

import wikinotify
from wikinotify import refusals, schemas
from wikinotify.i18n import SOURCE_LANGUAGE, available_languages, translated_msgids
from wikinotify.outbound import chat_targets, push, ssrf
from wikinotify.schemas import administration

SHIPPED = [lang for lang in available_languages() if lang != SOURCE_LANGUAGE]
#: The exceptions wikinotify refuses a value with, and which argument carries the reason.
REFUSING = {"Refused": 1, "Blocked": 0, "Unresolved": 0, "InvalidChatTarget": 0}


# -- every reason has a sentence ------------------------------------------------------------


def every_schema() -> list[Schema]:
    """Every schema wikinotify loads a body or a query with: its classes and its factories'."""
    found: list[Schema] = []
    for module in (schemas, administration):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Schema) and value is not Schema:
                found.append(value())
            elif isinstance(value, Schema):
                found.append(value)
    found += [schemas.preferences_update_schema(("mention",)), schemas.list_query_schema(("m",)),
              schemas.webhook_create_schema(), schemas.webhook_update_schema(),
              schemas.chat_create_schema(), administration.admin_settings_update_schema(("1",))]
    return found


def messages_of(field: fields.Field) -> set[str]:
    """The messages a field can refuse a value with: its own and its validators'."""
    found = {str(m) for m in field.error_messages.values()}
    for validator in field.validators:
        if isinstance(validator, validate.Range):
            found |= {validator.message_min, validator.message_max, validator.message_all}
        elif isinstance(validator, validate.Length):
            found |= {validator.message_min, validator.message_max, validator.message_all,
                      validator.message_equal}
        elif isinstance(validator, validate.OneOf):
            found.add(validator.error)
    inner = [getattr(field, "inner", None), getattr(field, "value_field", None),
             getattr(field, "key_field", None)]
    for part in filter(None, inner):
        found |= messages_of(part)
    if isinstance(field, fields.Nested):
        found |= schema_messages(field.schema)
    return found


def schema_messages(schema: Schema) -> set[str]:
    found = {str(m) for m in schema.error_messages.values()}
    for field in schema.load_fields.values():
        found |= messages_of(field)
    return found


def literal_reasons() -> set[str]:
    """The reasons written in wikinotify's code as literals: every string in a list given
    to ``ValidationError``, and the reason of each ``Refused``, ``Blocked``, … (an f-string
    as a template: its values as ``{…}``)."""
    found: set[str] = set()
    for path in Path(wikinotify.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name == "ValidationError" and node.args:
                for inner in ast.walk(node.args[0]):
                    if isinstance(inner, ast.List):
                        found |= {t for t in map(template, inner.elts) if t}
            elif name in REFUSING and len(node.args) > REFUSING[name]:
                found |= {t for t in [template(node.args[REFUSING[name]])] if t}
    return found


def template(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{value}"
                       for part in node.values)
    return None  # a name: one of the modules' reason constants, checked below


def example(reason: str) -> str:
    """``reason`` as the code would say it: each ``{…}`` given a value."""
    return "".join(literal + ("" if name is None else "7")
                   for literal, name, _spec, _conversion in string.Formatter().parse(reason))


def every_reason() -> list[str]:
    found = set().union(*map(schema_messages, every_schema()))
    return sorted(found | literal_reasons() | set(ssrf.REASONS) | set(chat_targets.REASONS)
            | set(push.REASONS))


def test_the_scan_finds_the_reasons_it_should():
    """The enumeration itself: if it found nothing, the next test could not fail."""
    reasons = every_reason()
    for known in ("Missing data for required field.", "Not a valid integer.",
                  "Length must be between {min} and {max}.", "Must be one of: {choices}.",
                  "Not a known IANA time zone name.", "Choose at least one category.",
                  "This URL is refused: {value}.", "No site has this id.", ssrf.NO_HOST,
                  "Must be at least {value} while anyone has an email digest.",
                  chat_targets.PARAMETER_REFUSED):
        assert known in reasons


@pytest.mark.parametrize("reason", every_reason())
def test_every_reason_the_code_can_give_has_a_sentence(reason):
    assert refusals.match(example(reason)) is not None, (
        f"{reason!r} has no sentence: add it to wikinotify/refusals.py's SENTENCES")


def test_every_kind_of_address_the_guard_names_has_words():
    kinds = {kind for _network, kind in ssrf.NOT_PUBLIC} | {ssrf.NON_PUBLIC}
    assert kinds <= set(refusals.ADDRESS_KINDS)


@pytest.mark.parametrize("language", SHIPPED)
def test_every_sentence_label_and_kind_is_in_every_catalogue(language):
    said = [*refusals.SENTENCES.values(), *refusals.LENGTH_FROM.values()]
    wanted = {s.text for s in said} | {s.for_a_list for s in said if s.for_a_list}
    wanted |= set(refusals.ADDRESS_KINDS.values()) | set(refusals.LABELS.values())
    wanted |= {refusals.UNKNOWN_REASON, "%(label)s: %(value)s"}
    assert sorted(wanted - translated_msgids(language)) == []


# -- what a reason reads as -------------------------------------------------------------------


@pytest.mark.parametrize(("language", "said"), [
    ("en", "This URL is refused: it leads to a private address (10.0.0.9), where the wiki "
           "sends nothing."),
    ("fr", "Cette URL est refusée\u202f: elle mène à une adresse privée (10.0.0.9), où le wiki "
           "n’envoie rien."),
    ("de", "Diese URL wird abgelehnt: Die URL führt zu einer privaten Adresse (10.0.0.9), wohin "
           "das Wiki nichts sendet."),
])
def test_a_reason_within_a_reason_is_said_whole(app, language, said):
    """The SSRF guard's reason inside the endpoint's, the kind of address inside that."""
    message = "This URL is refused: {}.".format(
        ssrf.NOT_PUBLIC_ADDRESS.format(kind="a private", address="10.0.0.9"))
    with app.test_request_context(headers={"Accept-Language": language}):
        assert refusals.sentence(message) == said


def test_marshmallow_length_reads_as_characters_or_as_choices(app):
    with app.test_request_context(headers={"Accept-Language": "en"}):
        assert refusals.sentence("Length must be between 1 and 100.", list_field=True) == (
            "Choose at least one and at most 100.")
        assert refusals.sentence("Length must be between 1 and 2000.") == (
            "Fill this in, with at most 2000 characters.")
        assert refusals.sentence("Length must be between 2 and 9.") == (
            "Enter from 2 to 9 characters.")
        assert refusals.sentence("Length must be between 0 and 255.") == (
            "Enter at most 255 characters.")
        assert refusals.sentence(
            "Must be greater than or equal to 1 and less than or equal to 3650.") == (
            "Enter a whole number from 1 to 3650.")
        assert refusals.sentence("Something no code says.") == "This value is not accepted."
