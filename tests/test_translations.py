"""The catalogues (docs/languages.md): every string extracted; every shipped language (French,
German) complete, its placeholders the source's, its typography its own; compiled files current."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from babel.messages.mofile import read_mo, write_mo
from babel.messages.pofile import read_po

from wikinotify.config import DEFAULT_CONFIG
from wikinotify.i18n import SOURCE_LANGUAGE, TRANSLATIONS_DIR, available_languages, message_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = [lang for lang in available_languages() if lang != SOURCE_LANGUAGE]
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")


def po_path(language: str) -> str:
    return os.path.join(TRANSLATIONS_DIR, language, "LC_MESSAGES", "messages.po")


def catalogue(language: str):
    with open(po_path(language), "rb") as handle:
        return [m for m in read_po(handle) if m.id]


def strings(value) -> list[str]:
    return list(value) if isinstance(value, list | tuple) else [value]


def extract(tmp_path) -> set[str]:
    out = tmp_path / "messages.pot"
    subprocess.run(
        [sys.executable, "-m", "babel.messages.frontend", "extract", "-F", "babel.cfg",
         "-k", "N_", "-k", "Np_:1,2", "-o", str(out), "--no-location", "--omit-header", "."],
        cwd=ROOT, check=True, capture_output=True,
    )
    with open(out, "rb") as handle:
        return {message_key(m.id) for m in read_po(handle) if m.id}


def test_french_and_german_are_shipped():
    assert {"fr", "de"} <= set(SHIPPED)


def test_the_template_holds_every_string_in_the_code(tmp_path):
    with open(os.path.join(TRANSLATIONS_DIR, "messages.pot"), "rb") as handle:
        committed = {message_key(m.id) for m in read_po(handle) if m.id}
    assert extract(tmp_path) == committed, "run scripts/i18n to refresh the catalogues"


@pytest.mark.parametrize("language", SHIPPED)
def test_every_string_is_translated(language):
    with open(os.path.join(TRANSLATIONS_DIR, "messages.pot"), "rb") as handle:
        wanted = {message_key(m.id) for m in read_po(handle) if m.id}
    translated = {message_key(m.id): message_key(m.string) for m in catalogue(language)}
    untranslated = sorted(
        str(m) for m in wanted if not translated.get(m) or not all(strings(translated[m]))
    )
    assert untranslated == []


@pytest.mark.parametrize("language", SHIPPED)
def test_every_translation_keeps_the_placeholders_of_its_source(language):
    """A plural's singular may say "one" for ``%(num)d`` (German "zweimal" is not
    plural-dependent here), so a form is held to the placeholders of the source it
    translates, less ``num`` for the first."""
    wrong = []
    for m in catalogue(language):
        sources = strings(m.id)
        for index, text in enumerate(strings(m.string)):
            source = sources[min(index, len(sources) - 1)]
            expected = set(PLACEHOLDER.findall(source))
            found = set(PLACEHOLDER.findall(text))
            if found != expected and not (index == 0 and found == expected - {"num"}):
                wrong.append((m.id, text))
    assert wrong == []


def test_french_typography():
    """A narrow no-break space before : ; ? ! and inside « », never a plain one; a
    typographic apostrophe; a title after "de" quoted, so it never needs elision."""
    wrong = []
    for m in catalogue("fr"):
        for text in strings(m.string):
            if (re.search(r"[ \u00a0][:;?!](\s|$)", text) or re.search(r"\w[;?!](\s|$)", text)
                    or re.search(r"\w:(\s|$)", text) or "'" in text
                    or re.search(r"«(?!\u202f)|(?<!\u202f)»", text)
                    or re.search(r"\bde %\((title|site)\)s", text)):
                wrong.append(text)
    assert wrong == []


def test_german_typography_and_address():
    """German quotes are „…“, never "…" or “…”; the reader is "Sie", never "du"."""
    wrong = []
    for m in catalogue("de"):
        for text in strings(m.string):
            if ('"' in text or "”" in text or text.count("„") != text.count("“")
                    or re.search(r"\b(du|dich|dir|dein\w*)\b", text, re.IGNORECASE)):
                wrong.append(text)
            if "%(title)s" in text and text != "Seite: %(title)s (%(path)s)" and (
                    "„%(title)s“" not in text):
                wrong.append(text)
    assert wrong == []


@pytest.mark.parametrize("language", SHIPPED)
def test_the_compiled_catalogue_matches_its_source(language):
    with open(po_path(language), "rb") as handle:
        compiled = io.BytesIO()
        write_mo(compiled, read_po(handle))
    compiled.seek(0)
    mo = os.path.join(TRANSLATIONS_DIR, language, "LC_MESSAGES", "messages.mo")
    with open(mo, "rb") as handle:
        shipped = {message_key(m.id): message_key(m.string) for m in read_mo(handle) if m.id}
    expected = {message_key(m.id): message_key(m.string) for m in read_mo(compiled) if m.id}
    assert shipped == expected, "run scripts/i18n to recompile"


def test_every_shipped_catalogue_is_offered_by_default():
    """A catalogue wikinotify ships is offered unless the wiki says otherwise (and a wiki
    that leaves one out names it in WIKINOTIFY_LANGUAGES)."""
    assert set(DEFAULT_CONFIG["WIKINOTIFY_LANGUAGES"]) == set(available_languages())
