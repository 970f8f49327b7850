"""A mail written by hand (:mod:`wikinotify.mail.wire`) is, byte for byte, the mail the
email package writes (``NotificationMessage.mime``); what it cannot write so, it leaves
to the package. Its links with a token are the URLs werkzeug builds."""

from __future__ import annotations

import email.quoprimime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wikinotify.host import SiteFacts
from wikinotify.mail import compose, wire
from wikinotify.mail.compose import NotificationMessage

#: What a body's quoted-printable encoder is given: UTF-8 read as Latin-1, so every
#: character below 256; the ones that matter most are at the edges of the plain range,
#: the line breaks (and those ``str.splitlines`` also breaks at) and white space.
LATIN_1 = st.text(alphabet=st.sampled_from(
    list("ab =\t\r\n.<>~!") + ["\x00", "\x0b", "\x0c", "\x1c", "\x7f", "\x85", "\xa0", "\xe9",
                               "\xff"]), max_size=400)
#: Text a mail body holds: ASCII, letters beyond it, long and short lines, white space
#: at their ends, a line break of every kind.
BODY = st.text(alphabet=st.sampled_from(
    list("abc xyz=?.\t\r\n-<>\"'") + ["é", "ü", "日", "\u2028", "\x0b", "\x85", "\xa0"]),
    max_size=1200)


def _mail(subject: str, body: str, html: str, **extra: str) -> NotificationMessage:
    message = NotificationMessage(
        subject=subject, recipients=["reader@example.com"], sender="Wiki <wiki@example.org>",
        body=body, html=html, date=1764597167.0, extra_headers={
            "List-Unsubscribe": "<https://wiki.example.org/u?t=" + "x" * 150 + ">",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click", **extra})
    message.msgId = "<1.2@wiki.example.org>"
    message.list_id = compose.list_id(SiteFacts(id="1", base_url="https://wiki.example.org",
                                                title="Wïki"))
    return message


def _by_the_package(message: NotificationMessage) -> bytes:
    return message.mime().as_bytes(policy=compose._WIRE)


@settings(max_examples=300, deadline=None)
@given(body=LATIN_1, limit=st.sampled_from([76, 78]))
def test_quoted_printable_is_the_standard_librarys(body, limit):
    assert wire.quoted_printable(body, limit) == email.quoprimime.body_encode(body, limit)


@pytest.mark.parametrize("line", [
    "a" * 77, "a" * 78, "a" * 79, "a" * 77 + "=", "a" * 76 + "=b", "a" * 78 + " ",
    "a" * 77 + " ", "a" * 76 + " ", "a" * 75 + "\t", " ", "=", "\xe9" * 30, ". ", ".",
])
def test_a_line_at_the_limit_is_encoded_as_the_standard_library_does(line):
    for body in (line, line + "\n", line + "\r\n" + line, "\n" + line + "\n\n"):
        assert wire.quoted_printable(body, 78) == email.quoprimime.body_encode(body, 78)


@settings(max_examples=300, deadline=None)
@given(body=BODY, html=BODY)
def test_a_mail_by_hand_is_the_bytes_the_package_writes(body, html):
    message = _mail("[Wïki] Hömé: 2 notifications", body, html)
    by_hand = message._by_hand()
    if by_hand is not None:  # base64 (many letters beyond Latin) is the package's
        assert by_hand == _by_the_package(message)
    assert message.as_bytes() == _by_the_package(message)


@pytest.mark.parametrize("body", [
    "short ASCII\n",                                     # 7bit
    "é\n" + "word " * 40,                                # quoted-printable, ten lines or fewer
    "\n".join(f"line {n} é " + "x" * n for n in range(40)),  # quoted-printable, more
    "",
])
def test_each_transfer_encoding_by_hand_is_the_packages(body):
    message = _mail("[Wiki] Home", body, f"<p>{body}</p>")
    assert message._by_hand() is not None
    assert message.as_bytes() == _by_the_package(message)


@pytest.mark.parametrize(("body", "extra"), [
    ("日本語のテキスト\n" * 5, {}),                      # base64
    ("text\n", {"X-Note": "Wïki"}),                      # a header the policy encodes
    ("text\n", {"X-Note": "x" * 1000}),                  # one it folds
])
def test_what_it_would_not_write_so_the_package_writes(body, extra):
    message = _mail("[Wiki] Home", body, "<p>html</p>\n", **extra)
    assert message._by_hand() is None
    assert message.as_bytes() == _by_the_package(message)


def test_a_body_that_holds_the_boundary_goes_under_one_the_package_makes():
    message = _mail("[Wiki] Home", f"it says {compose._BOUNDARY} here\n", "<p>html</p>\n")
    assert message._by_hand() is None
    boundary = message.mime().as_bytes(policy=compose._WIRE).split(b"\r\n\r\n--", 1)[1]
    assert not boundary.startswith(compose._BOUNDARY.encode())


#: Sites' base URLs, and tokens: URL-safe ones (every token wikinotify makes) and others.
BASE_URLS = ["https://wiki.example.org", "https://wiki.example.org/sub/",
             "http://127.0.0.1:8443/w", "https://xn--wki-4ma.example"]
TOKENS = ["eyJ2IjoxfQ.abc-_DEF", ".eJyrVkrLz1eyUkrKL8pRqgUAJHkE2A.x", "needs quoting+/=",
          "ünï", "a b", ""]


def test_a_link_with_a_token_is_the_url_werkzeug_builds(app):
    """The mail's links with a token (:func:`compose.site_url` keeps what comes before
    it) are werkzeug's, for every site and every token."""
    with app.app_context():
        for base_url in BASE_URLS:
            site = SiteFacts(id="1", base_url=base_url, title="Wiki")
            adapter = compose._adapter(app.url_map, base_url)
            for endpoint in ("wikinotify.mute_page", "wikinotify.unsubscribe_page"):
                for token in TOKENS:
                    werkzeug = adapter.build(endpoint, {"t": token}, force_external=True)
                    assert compose.site_url(site, endpoint, t=token) == werkzeug
            assert compose.site_url(site, "wikinotify.inbox_page") == adapter.build(
                "wikinotify.inbox_page", {}, force_external=True)
