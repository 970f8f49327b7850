"""Notification mail as mail providers' tools read it (docs/channels.md#email): a
``List-Id``, an HTML part with a language, a title and a preheader, a ``Message-ID`` on the
site's domain, ``multipart/alternative`` at the top, a footer that passes WCAG AA, and,
where Debian's ``spamassassin`` is installed, a score well under any filter's threshold.

Each check reads the raw bytes the real SMTP server received from a real RQ worker, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import email
import email.policy
import re
import shutil
import subprocess
from email.header import decode_header, make_header
from html.parser import HTMLParser

import pytest
from markupsafe import escape

from demo.models import db
from tests.helpers.contrast import contrast
from tests.helpers.jobs import run_jobs
from tests.helpers.mail import ENCODED_WORD, parse, read_list_id
from tests.helpers.wiki import edit, main_site, set_delay, watch
from wikinotify.host import SiteFacts
from wikinotify.mail import compose
from wikinotify.mail.compose import NotificationMessage, list_id

DOMAIN = "wiki.example.org"
#: A title with a quote and non-ASCII letters: the List-Id phrase must survive both.
TITLE = 'Ünïcode "quoted" wiki'
#: Where SpamAssassin's verdict starts to hurt; ours must stay well under it.
SPAM_SCORE_LIMIT = 1.0


pytestmark = pytest.mark.app_config(smtp=True, MAIL_DEFAULT_SENDER=f"Wiki <wiki@{DOMAIN}>")


@pytest.fixture
def mails(app, smtp) -> dict[str, bytes]:
    """The raw bytes of a single notification (carol, in French) and of a digest of two
    (alice), from a site served at https://wiki.example.org whose title needs care."""
    with app.app_context():
        set_delay(0)
        site = main_site()
        site.base_url, site.title = f"https://{DOMAIN}", TITLE
        db.session.commit()
        watch("home", "alice")  # alice also watches handbook/onboarding (the seed)
        watch("home", "carol")
        edit("handbook/onboarding", "bob", "One")
        edit("home", "bob", "Two")
        run_jobs(app)
    by_recipient = {parse(raw)["To"]: raw for raw in smtp.inbox.raw}
    assert set(by_recipient) == {"alice@example.com", "carol@example.com"}
    return {"digest": by_recipient["alice@example.com"],
            "notification": by_recipient["carol@example.com"]}


def header_block(raw: bytes) -> bytes:
    return raw.split(b"\r\n\r\n", 1)[0]


def html_of(raw: bytes) -> str:
    return parse(raw).get_body(("html",)).get_content()


# -- items 1, 3, 4: the headers and the structure -------------------------------------------


def test_both_mails_are_multipart_alternative_at_the_top_text_then_html(mails):
    for kind, raw in mails.items():
        message = parse(raw)
        assert message.get_content_type() == "multipart/alternative", kind
        assert [part.get_content_type() for part in message.iter_parts()] == [
            "text/plain", "text/html"], kind
        assert b"multipart/mixed" not in raw, kind


def test_the_message_id_is_on_the_sites_domain(mails):
    for kind, raw in mails.items():
        message_id = parse(raw)["Message-ID"]
        assert re.fullmatch(rf"<[^@<>\s]+@{re.escape(DOMAIN)}>", message_id), (kind, message_id)
    assert parse(mails["digest"])["Message-ID"] != parse(mails["notification"])["Message-ID"]


def test_every_mail_has_a_list_id_naming_the_site(mails):
    for kind, raw in mails.items():
        [line] = [h for h in header_block(raw).split(b"\r\n") if h.startswith(b"List-Id:")]
        value = str(make_header(decode_header(line[len(b"List-Id:"):].decode("ascii"))))
        assert value == f"{TITLE} <notifications.{DOMAIN}>", kind
        phrase, identifier = read_list_id(raw)
        assert (phrase, identifier) == (TITLE, f"notifications.{DOMAIN}"), kind


def test_the_rfc_8058_and_3834_headers_are_still_there(mails):
    for kind, raw in mails.items():
        message = parse(raw)
        assert message["List-Unsubscribe"].startswith(f"<https://{DOMAIN}/"), kind
        assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click", kind
        assert message["Auto-Submitted"] == "auto-generated", kind


@pytest.mark.parametrize("title", [
    "Main wiki", 'Say "hi", <world>', "Straße", TITLE, "Ünïcode wiki, " * 12 + "end",
    "back\\slash",
])
def test_a_list_id_reads_back_whatever_the_title(title):
    site = SiteFacts(id="1", base_url="https://wiki.example.org:8443/sub", title=title)
    value = list_id(site).encode("ascii")
    raw = b"List-Id: " + value + b"\r\n\r\n"
    assert read_list_id(raw) == (title, "notifications.wiki.example.org")
    for line in value.split(b"\r\n"):
        assert len(line) < 998
    assert all(len(word) <= 75 for word in ENCODED_WORD.findall(value))


@pytest.mark.parametrize("subject", [
    "[Main wiki] Home was edited by Bob", "[Wïki] Hömé", "[W] =?utf-8?q?x?= is text",
    "[W] " + "a long subject " * 80, 'Say "hi"; <world>, (yes)',
])
@pytest.mark.parametrize("sender", ["Wiki <wiki@localhost>", "Wiki, Inc <w@x.org>",
                                    ("Wïki", "w@x.org")])
@pytest.mark.parametrize("bodies", [("text\n", "<p>html</p>\n"),
                                    ("é\n" + "word " * 40, "<p>" + "ü" * 200 + "</p>")])
def test_a_mail_is_the_bytes_the_standard_policy_writes(subject, sender, bodies, monkeypatch):
    """compose keeps a header that needs no encoding as its string, and names the
    boundary itself: the bytes are those of the standard policy, which parses them all."""
    message = NotificationMessage(
        subject=subject, recipients=['"a b"@example.com'], sender=sender, body=bodies[0],
        html=bodies[1], date=1764597167.0, extra_headers={
            "List-Unsubscribe": "<https://wiki.example.org/u?t=" + "x" * 150 + ">",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"})
    message.msgId = "<1.2@wiki.example.org>"
    mine = message.as_bytes()
    standard = email.policy.SMTP.clone(cte_type="7bit")
    monkeypatch.setattr(compose, "_BUILD", standard)
    monkeypatch.setattr(compose, "_WIRE", standard.clone(max_line_length=998))
    boundary = re.compile(rb"=_[0-9a-f]{32}")
    assert boundary.sub(b"-", mine) == boundary.sub(b"-", message.as_bytes())


# -- item 2: the HTML part --------------------------------------------------------------------


def test_the_html_has_the_readers_language_a_title_and_a_preheader(mails):
    digest, single = html_of(mails["digest"]), html_of(mails["notification"])
    assert '<html lang="en">' in digest
    assert '<html lang="fr">' in single  # carol reads French
    assert f"<title>{escape(f'[{TITLE}] Home and 1 other page: 2 notifications')}</title>" in digest
    assert re.search(r"<title>\[.*\] Home\u202f: 1 modification par Bob Builder</title>", single)
    assert preheader(digest) == f"2 notifications from {TITLE}"
    assert preheader(single) == "La page «\u202fHome\u202f» a été modifiée par Bob Builder"


def preheader(html: str) -> str:
    """The text of the hidden block the body opens with."""
    match = re.search(r"<body[^>]*>\s*<div style=\"([^\"]*)\">(.*?)</div>", html, re.S)
    assert match, "no preheader right after <body>"
    style = match.group(1)
    for rule in ("display:none", "max-height:0", "overflow:hidden", "mso-hide:all"):
        assert rule in style
    return match.group(2).replace("&#34;", '"').strip()


# -- item 5: the footer's contrast ------------------------------------------------------------


class Colours(HTMLParser):
    """Each element's text colour against the nearest background set on it or an
    ancestor, from the inline styles a mail carries."""

    VOID = {"br", "hr", "meta", "img", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str | None, str | None]] = [("root", "#000", "#fff")]
        #: (tag, colour, background, the text inside it)
        self.pairs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        style = dict(attrs).get("style") or ""
        colour = _declared(style, "color")
        background = _declared(style, "background") or _declared(style, "background-color")
        _, inherited_colour, inherited_background = self.stack[-1]
        entry = (tag, colour or inherited_colour, background or inherited_background)
        if colour:
            self.pairs.append((tag, entry[1], entry[2]))
        if tag not in self.VOID:
            self.stack.append(entry)

    def handle_endtag(self, tag):
        if tag not in self.VOID and len(self.stack) > 1:
            self.stack.pop()


def _declared(style: str, name: str) -> str | None:
    match = re.search(rf"(?:^|;)\s*{name}\s*:\s*(#[0-9a-fA-F]{{3,6}})", style)
    return match.group(1) if match else None


def test_the_contrast_formula_gives_the_known_figures():
    assert round(contrast("#000", "#fff"), 2) == 21.0
    assert round(contrast("#777", "#fff"), 2) == 4.48  # the footer grey before the fix
    assert round(contrast("#767676", "#fff"), 2) == 4.54


def test_every_colour_in_both_mails_passes_wcag_aa(mails):
    for kind, raw in mails.items():
        parser = Colours()
        parser.feed(html_of(raw))
        assert any(tag == "p" for tag, _, _ in parser.pairs)  # the footer was seen
        for tag, colour, background in parser.pairs:
            ratio = contrast(colour, background)
            assert ratio >= 4.5, f"{kind}: <{tag}> {colour} on {background} is {ratio:.2f}:1"


# -- item 6: SpamAssassin ---------------------------------------------------------------------


def spam_score(raw: bytes) -> tuple[float, str]:
    """SpamAssassin's score for ``raw`` with its local tests only (no network), and the
    rules that fired."""
    result = subprocess.run(["spamassassin", "-t", "-L"], input=raw, capture_output=True,
                            timeout=120, check=True)
    report = re.sub(r",\s+", ",", parse(result.stdout)["X-Spam-Status"])  # unfolded
    match = re.search(r"score=(-?[\d.]+) .*?tests=(\S*)", report)
    assert match, report
    return float(match.group(1)), match.group(2)


@pytest.mark.skipif(shutil.which("spamassassin") is None,
                    reason="Debian's spamassassin is not installed (./dev test installs it)")
def test_spamassassin_scores_both_mails_under_one(mails):
    for kind, raw in mails.items():
        score, rules = spam_score(raw)
        assert score < SPAM_SCORE_LIMIT, f"{kind}: {score} ({rules})"
