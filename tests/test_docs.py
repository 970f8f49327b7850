"""The code cites only documents a clone has: no section sign of the old specification, no
seed, no earlier issue, no design notes or path outside the repository; and every
``docs/<file>.md#<heading>`` it names, and every link between the documents, leads to a
heading that exists. ``scripts/cite_docs.py`` rewrites old citations into such references."""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from scripts import cite_docs

#: The old specification's section sign, spelled by name: these examples are citations
#: on purpose, and this file is itself searched for any left.
S = "\N{SECTION SIGN}"

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: A reference into the docs from the code, and a link between the documents.
REFERENCE = re.compile(r"docs/(?P<file>[\w-]+\.md)(?:#(?P<anchor>[\w-]+))?")
LINK = re.compile(r"\]\((?P<file>(?:\.\./|docs/)?[\w-]*\.md)?#?(?P<anchor>[\w-]*)\)")


def code_files() -> list[Path]:
    return [path for path in cite_docs.files() if path.exists()]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFKC", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_code_cites_nothing_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{number}: {what}: {line}" for path in code_files()
             for number, what, line in cite_docs.leftovers(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_every_reference_in_the_code_names_a_heading_of_the_docs():
    broken = []
    for path in code_files():
        for match in REFERENCE.finditer(path.read_text(encoding="utf-8")):
            target = DOCS / match.group("file")
            if not target.exists() and match.group("file") == "settings.md":
                continue  # generated from the settings table (tests/test_settings_docs.py)
            if not target.exists() or (match.group("anchor") or "") not in {"", *anchors(target)}:
                broken.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert not broken, "\n".join(broken)


def test_every_link_between_the_documents_leads_to_a_heading():
    broken = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for match in LINK.finditer(page.read_text(encoding="utf-8")):
            name, wanted = match.group("file"), match.group("anchor")
            target = (page.parent / name).resolve() if name else page
            if not target.exists():
                if target.name != "settings.md":  # generated, see above
                    broken.append(f"{page.name}: {match.group(0)}")
            elif wanted and wanted not in anchors(target):
                broken.append(f"{page.name}: {match.group(0)}")
    assert not broken, "\n".join(broken)


def test_the_mapping_names_headings_that_exist():
    targets = [*cite_docs.SECTIONS.values(), *cite_docs.ISSUES.values(),
               *cite_docs.SEEDS.values(), *cite_docs.DESIGN.values(), *cite_docs.SHARED.values()]
    missing = []
    for target in targets:
        name, _, wanted = target.partition("#")
        if name == "settings.md" and not (DOCS / name).exists():
            continue  # generated from the settings table
        if not (DOCS / name).exists() or (wanted and wanted not in anchors(DOCS / name)):
            missing.append(target)
    assert not missing, missing


@pytest.mark.parametrize("old, new", [
    (f"coalescing ({S}8.3).", "coalescing (docs/rules.md#coalescing-is-idempotency)."),
    (f"({S}6, {S}6.1)", "(docs/rules.md#emit)"),
    ("(issue 12 item 6)", "(docs/channels.md#chat)"),
    ("(issue 14, items 1 to 6)", "(docs/channels.md#email)"),
    ('(DESIGN.md, "Lessons from\nwikinotify\'s own first review")',
     "(docs/rules.md#lessons-learned)"),
    (f"# RFC 1122 {S}3.2.1.3", f"# RFC 1122 {S}3.2.1.3"),
])
def test_the_script_rewrites_a_citation_once(old, new):
    rewritten, _, unknown = cite_docs.rewrite(old)
    assert (rewritten, unknown) == (new, [])
    assert cite_docs.rewrite(rewritten)[:2] == (new, 0)


def test_the_script_wraps_what_it_lengthens_in_comments_and_docstrings():
    source = (
        'def f():\n'
        '    """' + "word " * 14 + f'and then ({S}8.3).\n    More words."""\n'
        '    x = 1  # ' + "word " * 13 + f'({S}7.4)\n'
    )
    new, _, _ = cite_docs.rewrite(source)
    touched = {i for i, line in enumerate(new.split("\n")) if line not in source.split("\n")}
    wrapped, left = cite_docs.wrap(new, touched)
    assert left == []
    assert max(len(line) for line in wrapped.splitlines()) <= cite_docs.LINE_LENGTH
    compile(wrapped, "wrapped", "exec")
    assert "    (docs/rules.md#coalescing-is-idempotency). More words." in wrapped
    assert "    # (docs/rules.md#one-entry-per-person-per-event)" in wrapped


def test_the_script_finds_nothing_left_to_rewrite():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cite_docs.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout


#: The alerting rules an operator loads (docs/operating.md#runbook), each alert's name and
#: the anchor its runbook_url leads to.
RULES = DOCS / "prometheus-rules.yml"
ALERT = re.compile(r"^\s*- alert: (\w+)\s*$", re.MULTILINE)
RUNBOOK_URL = re.compile(r"runbook_url: \"[^\"#]*operating\.md#([\w-]+)\"")


def runbook_entries() -> list[str]:
    """The headings under docs/operating.md's "Runbook", in order."""
    text = (DOCS / "operating.md").read_text(encoding="utf-8")
    section = text.split("\n## Runbook\n", 1)[1].split("\n## ", 1)[0]
    return [line[4:].strip() for line in section.splitlines() if line.startswith("### ")]


def test_every_alert_has_a_runbook_entry_of_its_name():
    if not RULES.exists():
        pytest.skip("docs/prometheus-rules.yml is not in this tree: no alert to look up")
    rules = RULES.read_text(encoding="utf-8")
    alerts = ALERT.findall(rules)
    assert alerts, "no alert found in docs/prometheus-rules.yml"
    assert set(alerts) <= set(runbook_entries())
    assert RUNBOOK_URL.findall(rules) == [anchor(name) for name in alerts]
