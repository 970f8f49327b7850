"""No page title, site title, actor name or excerpt can add a header or a body to a
notification mail, whatever its encoding (docs/channels.md#email): RFC 2047 encoded words, folded
lines, raw control characters, Unicode line separators, overlong text. Each form goes
through the real pipeline (the wiki's own save and comment, a real RQ worker, a real SMTP
server on 127.0.0.1), on SQLite and PostgreSQL, and the bytes received are read back with
the standard library as a mail client would."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from email.message import EmailMessage

import dkim
import pytest

from demo import wiki
from demo.models import Site, User, Watch, db
from tests.helpers.jobs import run_jobs
from tests.helpers.mail import ENCODED_WORD, parse, read_list_id
from tests.helpers.wiki import set_delay, user
from wikinotify.host import SiteFacts
from wikinotify.mail.compose import NotificationMessage, list_id
from wikinotify.mail.dkim import DkimKey

#: What an attacker would like a reader's mail to carry.
INJECTED = "Reply-To: attacker@evil.example"
FAKE_BODY = "<fake body>"


def b_word(text: str, charset: str = "utf-8") -> str:
    return f"=?{charset}?b?{base64.b64encode(text.encode(charset)).decode('ascii')}?="


#: Each form as a wiki user could type it, in a title, a site title, a display name or a
#: comment. Not a NUL: neither database keeps one in a text column (the builder's test
#: below tries it).
FORMS = {
    "q word": "Home =?utf-8?q?=0D=0AReply-To:_attacker@evil.example=0D=0A=0D=0A"
              "<fake_body>?= end",
    "b word": f"Home {b_word(chr(13) + chr(10) + INJECTED + 2 * (chr(13) + chr(10)))} end",
    "upper case": "Home =?UTF-8?Q?=0D=0ABcc:_mallory@evil.example?= end",
    "another charset": "Home =?iso-8859-1?q?=0D=0AReply-To:_attacker@evil.example?= end",
    "ascii charset, b": f"Home {b_word(chr(10) + INJECTED, 'us-ascii')} end",
    "a language tag": "Home =?utf-8*en?q?=0A=0AReply-To:_attacker@evil.example?= end",
    "split across words": "Home =?utf-8?q?=0D=0AReply-?= =?utf-8?q?To:_attacker@?= "
                          "=?utf-8?q?evil.example?= end",
    "a space inside the word": "Home =?utf-8?q?=0D=0AReply-To: attacker@evil.example?= end",
    "inside a word": "Home=?utf-8?q?=0D=0AReply-To:_attacker@evil.example?=end",
    "an encoded line separator": "Home =?utf-8?q?=E2=80=A8Reply-To:_attacker@evil.example?=",
    "folded line": "Home\r\n Reply-To: attacker@evil.example\r\n\tX-Folded: yes",
    "raw CR LF, then a body": f"Home\r\n{INJECTED}\r\n\r\n{FAKE_BODY}",
    "raw CR": f"Home\r{INJECTED}",
    "raw LF": f"Home\n{INJECTED}",
    **{f"U+{ord(separator):04X}": f"Home{separator}{INJECTED}"
       for separator in "\u2028\u2029\u0085\u000b\u000c\u001c\u001d\u001e"},
    # As long as the demo's columns allow (255): a subject of over 700 characters.
    "overlong, encoded words": " ".join(["=?utf-8?q?=0D=0AX-Long:_" + "a" * 50 + "?="] * 3),
    "overlong, one word": "Ü" * 120 + "=?utf-8?q?=0D=0A" + "x" * 119,
}

#: The line breaks and separators a header value is folded at, as RFC 5322 readers,
#: Python's ``str.splitlines`` and mail clients see them, with the spaces around them.
LINE_BREAKS = re.compile(r"\s*[\r\n\x00\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+\s*")


def folded(text: str) -> str:
    """``text`` as a header shows it: on one line."""
    return LINE_BREAKS.sub(" ", text).strip()


pytestmark = pytest.mark.app_config(smtp=True)


def account(name: str) -> User:
    """An account that may read what alice reads."""
    person = User(username=name, email=f"{name}@example.com", display_name=name.title(),
                  groups=list(user("alice").groups))
    db.session.add(person)
    return person


@dataclass
class Wiki:
    """A site of its own for one form: an editor, a page edited and a page commented on,
    each watched by a reader of its own (a mail per (reader, site), not a digest)."""

    number: int
    form: str
    site: Site = field(init=False)
    editor: User = field(init=False)
    readers: dict[str, User] = field(init=False)

    def __post_init__(self) -> None:
        self.site = Site(hostname=self.host, title="Before", base_url=f"http://{self.host}")
        self.editor = account(f"editor{self.number}")
        self.readers = {kind: account(f"{kind}reader{self.number}") for kind in PAGES}
        db.session.add(self.site)
        db.session.flush()
        for kind, path in PAGES.items():
            watched = wiki.save_page(self.site, user("admin"), path, "Before", "v1")
            db.session.add(Watch(page_id=watched.id, user_id=self.readers[kind].id,
                                 site_id=self.site.id))
        db.session.commit()

    @property
    def host(self) -> str:
        return f"injection{self.number}.localhost"

    def act(self) -> None:
        """The site titled ``form``; its editor, named ``form``, saves a page under the
        title ``form`` and comments ``form`` on the other."""
        self.site.title = self.editor.display_name = self.form
        db.session.commit()
        wiki.save_page(self.site, self.editor, PAGES["edit"], self.form, "v2")
        wiki.add_comment(wiki.find_page(self.site, PAGES["comment"]), self.editor, self.form)

    def mail(self, smtp, kind: str) -> tuple[bytes, EmailMessage]:
        """The mail ``kind``'s reader received, found by its bytes: an injection may
        have pushed its ``To`` out of the headers."""
        address = re.escape(self.readers[kind].email.encode())
        line = re.compile(rb"^To: " + address + rb"\r$", re.M)
        [raw] = [raw for raw in smtp.inbox.raw if line.search(raw)]
        return raw, parse(raw)

    def subject(self, kind: str) -> str:
        if kind == "edit":
            return f"[{self.form}] {self.form}: 1 edit by {self.form}"
        return f"[{self.form}] Before: 1 comment by {self.form}"


#: The page of each kind of mail, on every form's site.
PAGES = {"edit": "injection/edited", "comment": "injection/commented"}


def headers(message: EmailMessage) -> list[str]:
    return [name.lower() for name in message.keys()]


def parts(message: EmailMessage) -> list[str]:
    return [part.get_content_type() for part in message.walk()]


def test_no_title_site_title_actor_name_or_excerpt_adds_a_header_or_a_body(app, smtp):
    with app.app_context():
        set_delay(0)
        ordinary, *wikis = [Wiki(number, form) for number, form in
                            enumerate(["Home", *FORMS.values()])]
        run_jobs(app)  # the pages' creation, told to whoever hears of new pages
        for each in (ordinary, *wikis):
            each.act()
        run_jobs(app)
        baseline = {kind: ordinary.mail(smtp, kind)[1] for kind in PAGES}
        assert baseline["edit"]["Subject"] == "[Home] Home: 1 edit by Home"
        for name in ("from", "to", "subject", "date", "message-id", "list-id",
                     "list-unsubscribe", "list-unsubscribe-post", "auto-submitted"):
            assert headers(baseline["edit"]).count(name) == 1, name
        assert "reply-to" not in headers(baseline["edit"])  # no reply address is configured
        for label, each in zip(FORMS, wikis, strict=True):
            for kind in PAGES:
                assert_the_readers_own(each, kind, *each.mail(smtp, kind), baseline[kind],
                                       where=label)


def assert_the_readers_own(each: Wiki, kind: str, raw: bytes, message: EmailMessage,
                           baseline: EmailMessage, *, where: str) -> None:
    """``message`` has the headers and parts of ``baseline`` (the same mail about
    ordinary titles), each saying what the wiki wrote in it, and the body is the wiki's."""
    where = f"{where} ({kind}): {raw[:2000]!r}"
    assert headers(message) == headers(baseline), where
    assert message.defects == [] and message["Reply-To"] is None, where
    assert parts(message) == parts(baseline), where
    assert message["Subject"] == folded(each.subject(kind)), where
    assert message["From"] == baseline["From"], where
    assert message["To"] == each.readers[kind].email, where
    assert message["Auto-Submitted"] == "auto-generated", where
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click", where
    assert message["List-Unsubscribe"].startswith(
        f"<http://{each.host}/_notifications/unsubscribe?t="), where
    assert read_list_id(raw) == (folded(each.form), f"notifications.{each.host}"), where
    assert all(len(word) <= 75 for word in ENCODED_WORD.findall(raw)), where
    text = message.get_body(("plain",)).get_content()
    assert message["List-Unsubscribe"][1:-1] in text, where  # the footer is ours
    assert f"http://{each.host}/pages/{PAGES[kind]}" in text, where


@pytest.mark.parametrize("form", [*FORMS.values(), f"Home\x00{INJECTED}"], ids=[*FORMS, "NUL"])
def test_the_mail_builder_writes_any_title_as_text_in_rfc_2047_words(form, dkim_key):
    """Each form and a NUL (which neither database keeps in a title), built directly:
    the headers read back are those written, each saying its text, every encoded word
    within RFC 2047's 75 characters, and the DKIM signature over them holds."""
    message = NotificationMessage(
        subject=f"[Wiki] {form} was edited", recipients=["reader@example.com"],
        sender="Wiki <wiki@example.org>", body="text\n", html="<p>html</p>\n",
        extra_headers={"List-Unsubscribe": "<https://wiki.example.org/u?t=x>",
                       "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"})
    message.msgId = "<1.2@wiki.example.org>"
    message.list_id = list_id(SiteFacts(id="1", base_url="https://wiki.example.org",
                                        title=form))
    message.dkim = DkimKey(b"wiki", b"example.org", dkim_key[0].read_bytes())
    raw = message.as_bytes()
    read = parse(raw)
    assert headers(read) == [
        "dkim-signature", "list-id", "subject", "from", "to", "date", "message-id",
        "list-unsubscribe", "list-unsubscribe-post", "mime-version", "content-type"]
    assert read.defects == [] and parts(read) == [
        "multipart/alternative", "text/plain", "text/html"]
    assert read["Subject"] == folded(f"[Wiki] {form} was edited")
    assert read_list_id(raw) == (folded(form), "notifications.wiki.example.org")
    assert read.get_body(("plain",)).get_content().splitlines() == ["text"]
    assert all(len(word) <= 75 for word in ENCODED_WORD.findall(raw))
    assert dkim.verify(raw, dnsfunc=lambda name, timeout=5: b"v=DKIM1; k=rsa; p=" + dkim_key[1])
