"""wikinotify.css takes every colour from its custom properties, so a host restyles it from
its own stylesheet, and both themes keep WCAG AA contrast (docs/adopting.md#themes)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.contrast import contrast

CSS = (Path(__file__).parent.parent / "wikinotify" / "static" / "wikinotify"
       / "wikinotify.css").read_text()

#: A hex colour, a colour function or a named colour a stylesheet might slip in.
COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}\b|\b(?:rgba?|hsla?|hwb|lab|lch|oklab|oklch)\(|"
                    r"\b(?:white|black|red|green|blue|gr[ae]y|silver|orange|yellow)\b")
DEFINITION = re.compile(r"^\s*--wn-[a-z-]+\s*:")
COMMENT = re.compile(r"/\*.*?\*/", re.S)


def palette() -> tuple[dict[str, str], dict[str, str]]:
    """The light and the dark value of each custom property: ``light-dark(light, dark)``, or
    one value for both."""
    body = CSS.split(":where(:root) {", 1)[1].split("}", 1)[0]
    light, dark = {}, {}
    for name, value in re.findall(r"(--wn-[a-z-]+)\s*:\s*([^;]+);", COMMENT.sub("", body)):
        pair = re.fullmatch(r"light-dark\((.+),\s*(.+)\)", value.strip())
        light[name], dark[name] = pair.groups() if pair else (value.strip(), value.strip())
    return light, dark


LIGHT, DARK = palette()


def test_no_colour_is_written_outside_the_custom_properties():
    lines = COMMENT.sub(lambda m: "\n" * m.group().count("\n"), CSS).splitlines()
    stray = [f"{number}: {line.strip()}" for number, line in enumerate(lines, 1)
             if COLOUR.search(line) and not DEFINITION.match(line)]
    assert not stray, "colours outside the --wn-* definitions:\n" + "\n".join(stray)


def test_the_classes_choose_a_theme():
    assert ":where(.wn-light) { --wn-scheme: light; }" in CSS
    assert ":where(.wn-dark) { --wn-scheme: dark; }" in CSS
    assert LIGHT["--wn-scheme"] == "light dark"  # else the reader's system theme


def test_every_text_colour_passes_aa_on_every_background_of_its_theme():
    """axe judges what the pages show; this judges every pair, shown or not yet."""
    texts = ["--wn-fg", "--wn-muted", "--wn-accent", "--wn-danger", "--wn-success"]
    grounds = ["--wn-bg", "--wn-new-bg", "--wn-banner-bg"]
    for theme in (LIGHT, DARK):
        for text in texts:
            for ground in grounds:
                ratio = contrast(theme[text], theme[ground])
                assert ratio >= 4.5, (text, ground, theme[text], theme[ground], ratio)
        assert contrast(theme["--wn-badge-fg"], theme["--wn-badge-bg"]) >= 4.5
