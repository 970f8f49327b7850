"""The catalogues: every string extracted, French complete, compiled files current."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from babel.messages.mofile import read_mo, write_mo
from babel.messages.pofile import read_po

from wikinotify.i18n import TRANSLATIONS_DIR, message_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PO = os.path.join(TRANSLATIONS_DIR, "fr", "LC_MESSAGES", "messages.po")
MO = os.path.join(TRANSLATIONS_DIR, "fr", "LC_MESSAGES", "messages.mo")


def extract(tmp_path) -> set[str]:
    out = tmp_path / "messages.pot"
    subprocess.run(
        [sys.executable, "-m", "babel.messages.frontend", "extract", "-F", "babel.cfg",
         "-k", "N_", "-k", "Np_:1,2", "-o", str(out), "--no-location", "--omit-header", "."],
        cwd=ROOT, check=True, capture_output=True,
    )
    with open(out, "rb") as handle:
        return {message_key(m.id) for m in read_po(handle) if m.id}


def test_the_template_holds_every_string_in_the_code(tmp_path):
    with open(os.path.join(TRANSLATIONS_DIR, "messages.pot"), "rb") as handle:
        committed = {message_key(m.id) for m in read_po(handle) if m.id}
    assert extract(tmp_path) == committed, "run scripts/i18n to refresh the catalogues"


def test_french_translates_every_string():
    with open(os.path.join(TRANSLATIONS_DIR, "messages.pot"), "rb") as handle:
        wanted = {message_key(m.id) for m in read_po(handle) if m.id}
    with open(PO, "rb") as handle:
        french = {message_key(m.id): message_key(m.string) for m in read_po(handle) if m.id}
    untranslated = sorted(
        str(m) for m in wanted if not french.get(m) or not all(french[m])
    )
    assert untranslated == []


def test_the_compiled_catalogue_matches_its_source():
    with open(PO, "rb") as handle:
        compiled = io.BytesIO()
        write_mo(compiled, read_po(handle))
    compiled.seek(0)
    with open(MO, "rb") as handle:
        shipped = {message_key(m.id): message_key(m.string) for m in read_mo(handle) if m.id}
    expected = {message_key(m.id): message_key(m.string) for m in read_mo(compiled) if m.id}
    assert shipped == expected, "run scripts/i18n to recompile"
