"""Rewrite the code's citations of documents outside the repository into references into
``docs/``: ``§8.3`` becomes ``docs/rules.md#coalescing-is-idempotency``, "issue 12" becomes
``docs/channels.md#webhooks``, and so on, from the one mapping below.

    python scripts/cite_docs.py            # rewrite; print, and exit 1 on, what is left
    python scripts/cite_docs.py --check    # change nothing; exit 1 if anything would change
                                         # or is left

Idempotent: a second run finds nothing to rewrite. Python lines that grow past the line
length are wrapped, in comments and docstrings only (a string in code is printed instead).
Standard library only. ``tests/test_docs.py`` checks the result, and that every reference
names a heading ``docs/`` has; a heading renamed there is renamed here too.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The folders whose files are rewritten (and ``wsgi.py``).
FOLDERS = ("wikinotify", "tests", "bench", "demo", "examples", "migrations", "scripts")
SUFFIXES = (".py", ".html", ".jinja", ".js", ".txt", ".md", ".cfg", ".ini", ".mako")
SKIP_PARTS = {"__pycache__", ".axe", "node_modules", "translations", "static"}
#: This script and its test, whose mapping and examples are citations on purpose.
SKIP_FILES = {Path("scripts/cite_docs.py"), Path("tests/test_docs.py")}
LINE_LENGTH = 100

# -- the mapping ---------------------------------------------------------------------------

#: A section of the original specification -> where the rule it stated is said now.
SECTIONS = {
    "4": "rules.md#a-category-is-a-module",
    "4.1": "rules.md#a-category-is-a-module",
    "4.2": "rules.md#the-launch-categories",
    "4.3": "rules.md#reviewers",
    "5": "rules.md#preferences-are-stored-only-where-they-differ",
    "5.1": "rules.md#preferences-are-stored-only-where-they-differ",
    "5.2": "rules.md#the-preferences-page",
    "6": "rules.md#emit",
    "6.1": "rules.md#emit",
    "6.2": "rules.md#origin",
    "6.3": "rules.md#deleting-a-page",
    "7": "rules.md#claiming-events",
    "7.1": "rules.md#claiming-events",
    "7.2": "rules.md#access",
    "7.3": "rules.md#candidates-in-batches",
    "7.4": "rules.md#one-entry-per-person-per-event",
    "7.5": "rules.md#writing-entries",
    "7.6": "rules.md#long-fan-outs",
    "8": "rules.md#the-outbox",
    "8.1": "rules.md#the-outbox",
    "8.2": "rules.md#entries",
    "8.3": "rules.md#coalescing-is-idempotency",
    "9": "rules.md#the-inbox-api",
    "9.1": "rules.md#the-inbox-api",
    "9.2": "rules.md#the-inbox-page",
    "9.3": "rules.md#live-updates",
    "10": "rules.md#mail",
    "10.1": "rules.md#what-a-mail-says",
    "10.2": "rules.md#mail-cadence",
    "10.3": "rules.md#the-mail-run",
    "10.4": "rules.md#one-click-unsubscribe",
    "10.5": "rules.md#digests",
    "11": "rules.md#the-site-switch",
    "12": "rules.md#administration",
    "12.1": "rules.md#instance-settings",
    "12.2": "rules.md#admin-notifications",
    "12.3": "rules.md#retention",
    "13": "adopting.md#adding-a-kind-of-notification",
    "14": "rules.md#corner-cases",
    "15": "rules.md#emit",
}

#: An earlier issue of the project, or one of its items ("12.6": issue 12, item 6) -> the
#: part of the docs that describes what it built.
ISSUES = {
    "7": "operating.md#deploying",
    "8": "operating.md#failures-and-dead-letters",
    "9": "journey.md#where-the-code-lives",
    "10": "journey.md#the-live-badge",
    "11": "rules.md#digests",
    "11.3": "rules.md#the-inbox-page",
    "12": "channels.md#webhooks",
    "12.6": "channels.md#chat",
    "12.7": "rules.md#the-preferences-page",
    "13": "benchmarks.md#the-fan-out",
    "13.4": "benchmarks.md#the-mail-drain",
    "13.5": "benchmarks.md#the-fan-out",
    "14": "channels.md#email",
    "14.7": "adopting.md#in-your-pages",
    "14.8": "rules.md#admin-notifications",
    "14.9": "rules.md#mail-cadence",
    "21": "rules.md#lessons-learned",
    "21.1": "channels.md#email",
    "21.4": "channels.md#webhooks",
    "21.5": "channels.md#webhooks",
    "21.7": "channels.md#webhooks",
    # This renovation, should a branch made during it cite it.
    "22": "journey.md#where-the-code-lives",
    "22.2": "rules.md#channels",
    "22.3": "rules.md#preferences-are-stored-only-where-they-differ",
    "22.4": "rules.md#lessons-learned",
    "22.5": "settings.md",
    "22.6": "rules.md",
    "22.8": "adopting.md#in-your-pages",
}

#: The two seeds the design drew on: a notification center's delivery model, and a
#: framework's notifications (the inbox API's rules).
SEEDS = {"001": "rules.md#channels", "002": "rules.md#the-inbox-api"}

#: A section of the design notes (by the start of its title) -> where it is said now.
DESIGN = {
    "channels": "rules.md#channels",
    "lessons": "rules.md#lessons-learned",
    "reading cancels the mail": "rules.md#lessons-learned",
    "what a user owns": "rules.md#what-a-user-owns",
    "routes": "rules.md#the-inbox-api",
    "invariants 6": "rules.md#mail",
    "invariants 1": "rules.md#the-fan-out",
    "invariant 9": "rules.md#the-inbox-api",
    "": "rules.md#lessons-learned",
}

#: Sentences a mechanical rewrite would leave awkward, said again whole (applied first).
PHRASES = {
    "(its class, seed 001's retry classes)": "(its class, as docs/rules.md#channels has them)",
    "(issue 12 item 5, seed 001's model)": "(docs/rules.md#channels)",
    "(seed 001's model; DESIGN.md, \"Channels\")": "(docs/rules.md#channels)",
    ' (seed 002: "the inbox cannot be read across recipients")': "",
    "(see the issue 10 report)": "(docs/journey.md#the-live-badge)",
    "The smaller host interface (issue 9)":
        "The smaller host interface (the README's second adoption step)",
    "reviewer's answer to your suggestion (issue 11)":
        "reviewer's answer to your suggestion (docs/rules.md#the-launch-categories)",
    "instance-scoped mail goes out with (§10.3, §11)":
        "instance-scoped mail goes out with (§10.3)",
    "Apprise URL may say (issue 21)": "Apprise URL may say (docs/channels.md#chat)",
    "# -- what a target may say (issue 21)": "# -- what a target may say (docs/channels.md#chat)",
    "(:class:`Turns`, issue 21)": "(:class:`Turns`, docs/channels.md#webhooks)",
    "The write API's rate limits (issue 21)":
        "The write API's rate limits (docs/adopting.md#what-the-api-and-the-pages-refuse)",
    "#: The targets of issue 13:": "#: The targets (docs/benchmarks.md#the-fan-out):",
    "the spec's order decides": "the higher priority decides",
    "spec's worked example": "worked example",
    "(the spec's ``page:edit`` emit site: the reviewer":
        "(the ``page:edit`` an approval emits: the reviewer",
    "# The spec's emit site for an approval:": "# What an approval emits:",
    "a notification category of this wiki (wikinotify, §4.1).\n":
        "a notification category of this wiki.\n\n"
        "What a category is: wikinotify's docs/rules.md#a-category-is-a-module.\n",
}

#: Paths into the shared folder outside the repository.
SHARED = {
    "DESIGN.md": "rules.md",
    "seeds/000-wikijs-notifications-spec.md": "rules.md",
}

# -- what a citation looks like ------------------------------------------------------------

#: What points outside the repository, once the rewrite is done (``tests/test_docs.py``
#: checks the same). An RFC's own section (``RFC 1122 §3.2.1.3``) is the RFC's and stays.
OUTSIDE = {
    "a section of the old specification": re.compile(r"(?<!RFC \d{4} )(?<!RFC \d{3} )§"),
    "a seed": re.compile(r"\bseeds? ?0\d\d"),
    "an earlier issue": re.compile(r"\b[Ii]ssue #?\d+"),
    "the shared folder": re.compile(r"\.\./shared"),
    "the design notes": re.compile(r"DESIGN\.md"),
    "the specification": re.compile(r"\bthe spec\b"),
}

SECTION = re.compile(r"(?P<rfc>RFC \d+ )?§ ?(?P<n>\d+(?:\.\d+)*)")
ISSUE = re.compile(
    r"(?:items? (?P<before>\d+) of )?\b[Ii]ssue (?P<n>\d+)"
    r"(?:,?\s+items? (?P<item>\d+)(?:(?:,| to| and| ?[–-]) ?\d+)*)?"
)
SEED = re.compile(r"\bseed (?P<n>\d{3})(?:'s)?")
DESIGN_NOTE = re.compile(
    r"(?:\.\./shared/)?DESIGN\.md(?:[,;]? *(?:\"(?P<title>[^\"]+)\""
    r"|(?P<what>routes, invariant \d+|invariants? \d+))(?:[-–, \d]*\d)?)?"
)
SHARED_PATH = re.compile(r"\.\./shared/(?P<path>[\w./-]+\w)")
#: A link this script wrote, to find the lines it touched and to merge repeats.
LINK = re.compile(r"docs/[\w-]+\.md(?:#[\w-]+)?")


def _design_target(match: re.Match[str]) -> str | None:
    title = " ".join((match.group("title") or match.group("what") or "").split()).lower()
    for start, target in DESIGN.items():
        if title.startswith(start):
            return target
    return None


#: A comment that heads a part of a module: ``# -- title ------``, padded to a width.
DIVIDER = re.compile(r"^(?P<head>[ \t]*# -- .*?) (?P<dashes>-{3,})$", re.M)
#: A parenthesis without another inside it, whose repeated links are said once.
PARENTHESIS = re.compile(r"\(([^()]*)\)")


def rewrite(text: str, link_prefix: str = "") -> tuple[str, int, list[str]]:
    """``text`` with every known citation replaced: (the new text, how many, what is left)."""
    count = 0
    unknown: list[str] = []

    def divider(match: re.Match[str]) -> str:
        nonlocal count
        head, found, left = rewrite(match.group("head"), link_prefix)
        count += found
        unknown.extend(left)
        width = min(LINE_LENGTH, max(len(match.group(0)), len(head) + 4))
        return f"{head} {'-' * (width - len(head) - 1)}" if len(head) + 4 <= width else head

    text = DIVIDER.sub(divider, text)

    def sub(pattern: re.Pattern[str], target: Callable[[re.Match[str]], str | None]) -> None:
        nonlocal text, count

        def one(match: re.Match[str]) -> str:
            nonlocal count
            found = target(match)
            if found == "":
                return match.group(0)
            if found is None:
                unknown.append(" ".join(match.group(0).split()))
                return match.group(0)
            count += 1
            return f"{link_prefix}docs/{found}"

        text = pattern.sub(one, text)

    for old, new in PHRASES.items():
        if old in text:
            count += text.count(old)
            text = text.replace(old, new)

    def issue(match: re.Match[str]) -> str | None:
        item = match.group("item") or match.group("before")
        number = match.group("n")
        return ISSUES.get(f"{number}.{item}") or ISSUES.get(number)

    def section(match: re.Match[str]) -> str | None:
        # An RFC's section stays: it is the RFC's, found in the RFC.
        return "" if match.group("rfc") else SECTIONS.get(match.group("n"))

    sub(DESIGN_NOTE, _design_target)
    sub(SHARED_PATH, lambda m: SHARED.get(m.group("path")))
    sub(SEED, lambda m: SEEDS.get(m.group("n")))
    sub(ISSUE, issue)
    sub(SECTION, section)
    # "(§6, §6.1)" may name one heading twice now: say it once.
    text = PARENTHESIS.sub(_once, text)
    return text, count, unknown


def _once(match: re.Match[str]) -> str:
    """A parenthesis with each link in it once: a later repeat goes with its separator."""
    parts = re.split(r"(\s*[,;]\s*)", match.group(1))
    seen: set[str] = set()
    kept: list[str] = []
    for index in range(0, len(parts), 2):
        part = parts[index]
        link = part.removeprefix("wikinotify's ")
        if LINK.fullmatch(link):
            if link in seen:
                continue
            seen.add(link)
        if kept:
            kept.append(parts[index - 1])
        kept.append(part)
    return f"({''.join(kept)})"


# -- keeping Python lines within the line length --------------------------------------------


def _line_kinds(text: str) -> dict[int, tuple[str, int]]:
    """Line index -> (kind, column): ``comment`` (the whole line), ``trailing`` (a comment
    after code, from ``column``), ``doc`` (inside a string that is a statement of its own,
    a docstring). Lines not listed are code."""
    kinds: dict[int, tuple[str, int]] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        for index, line in enumerate(text.split("\n")):
            if line.lstrip().startswith("#"):
                kinds[index] = ("comment", 0)
        return kinds
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    for position, token in enumerate(significant):
        if token.type != tokenize.STRING:
            continue
        before = significant[position - 1].type if position else tokenize.ENCODING
        after = significant[position + 1].type if position + 1 < len(significant) else None
        if before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING) \
                and after in (tokenize.NEWLINE, tokenize.ENDMARKER):
            for row in range(token.start[0], token.end[0] + 1):
                kinds[row - 1] = ("doc", 0)
    for token in tokens:
        if token.type == tokenize.COMMENT:
            row, column = token.start
            line = token.line.split("\n")[0]
            whole = not line[:column].strip()
            kinds[row - 1] = ("comment", 0) if whole else ("trailing", column)
    return kinds


def _continues(line: str, prefix: str) -> bool:
    """Whether ``line`` is a further line of the same paragraph as one with ``prefix``."""
    if not line.startswith(prefix) or line[len(prefix):len(prefix) + 1].isspace():
        return False
    rest = line[len(prefix):].strip()
    return bool(rest) and not rest.startswith(("-", "*", '"""', "'''", ">>>", ":", "=")) \
        and not re.match(r"\d+\.", rest)


def wrap(text: str, touched: set[int]) -> tuple[str, list[str]]:
    """Break the ``touched`` lines longer than the line length at a space, carrying the
    rest into the next line of the same comment or docstring paragraph, else onto a new
    line of its own."""
    lines = text.split("\n")
    kinds = _line_kinds(text)
    left: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if index not in touched or len(line) <= LINE_LENGTH:
            index += 1
            continue
        kind, column = kinds.get(index, ("code", 0))
        indent = line[: len(line) - len(line.lstrip())]
        if kind == "comment":
            marker = re.match(r"\s*#:?\s?", line)
            prefix = marker.group(0) if marker else f"{indent}# "
            floor = len(prefix)
        elif kind == "trailing":
            prefix, floor = f"{indent}# ", column + 2
        elif kind == "doc":
            prefix = indent
            floor = len(indent) + (3 if line.lstrip().startswith(('"""', "'''")) else 0)
        else:
            left.append(line.strip())
            index += 1
            continue
        cut = line.rfind(" ", floor, LINE_LENGTH + 1)
        while cut > floor and line[:cut].count("`") % 2:  # never inside a ``literal``
            cut = line.rfind(" ", floor, cut)
        if cut <= floor:
            left.append(line.strip())
            index += 1
            continue
        head, tail = line[:cut].rstrip(), line[cut + 1:].strip()
        lines[index] = head
        following = lines[index + 1] if index + 1 < len(lines) else ""
        joinable = kind in ("comment", "doc") and '"""' not in tail and "'''" not in tail \
            and kinds.get(index + 1, ("code", 0))[0] == kind and _continues(following, prefix)
        if joinable:
            lines[index + 1] = f"{prefix}{tail} {following[len(prefix):].lstrip()}"
        else:
            lines.insert(index + 1, f"{prefix}{tail}")
            kinds = {(k + 1 if k > index else k): v for k, v in kinds.items()}
            kinds[index + 1] = (kind if kind != "trailing" else "comment", 0)
            touched = {(k + 1 if k > index else k) for k in touched}
        touched.add(index + 1)
        index += 1
    return "\n".join(lines), left


# -- files -----------------------------------------------------------------------------------


def files(root: Path = ROOT) -> Iterator[Path]:
    yield root / "wsgi.py"
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and path.name.endswith(SUFFIXES) and relative not in SKIP_FILES \
                    and not SKIP_PARTS.intersection(relative.parts):
                yield path


def leftovers(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, what, the line) of each citation outside the repository in ``text``."""
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in OUTSIDE.items():
            if pattern.search(line):
                yield number, what, line.strip()


def run(check: bool) -> int:
    total, left = 0, 0
    for path in files():
        if not path.exists():
            continue
        old = path.read_text(encoding="utf-8")
        # A module a wiki generates from a template lives outside wikinotify: say whose.
        prefix = "wikinotify's " if path.name.endswith(".py.jinja") else ""
        new, count, _ = rewrite(old, prefix)
        name = path.relative_to(ROOT)
        if path.suffix == ".py" or path.name.endswith(".py.jinja"):
            before = set(old.split("\n"))
            touched = {i for i, line in enumerate(new.split("\n")) if line not in before}
            new, long_lines = wrap(new, touched)
            for line in long_lines:
                print(f"{name}: too long to wrap, fix by hand: {line}")
        for number, what, line in leftovers(new):
            print(f"{name}:{number}: {what}, not in the mapping: {line}")
            left += 1
        if new != old:
            total += count
            if not check:
                path.write_text(new, encoding="utf-8")
    verb = "would rewrite" if check else "rewrote"
    print(f"{verb} {total} citations; {left} left, not in the mapping")
    return 1 if left or (check and total) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if "
                        "anything would change or is left")
    return run(parser.parse_args().check)


if __name__ == "__main__":
    sys.exit(main())
