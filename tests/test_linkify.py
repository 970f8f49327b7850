"""An announcement's body is plain text: escaped, its http(s) addresses links, nothing else
(docs/rules.md#announcements)."""

from __future__ import annotations

from wikinotify.linkify import linkify


def link(address: str) -> str:
    return f'<a href="{address}" rel="nofollow noopener">{address}</a>'


def test_markup_is_shown_as_written():
    assert linkify('<script>alert("x")</script> & <b>') == (
        "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;b&gt;")


def test_http_and_https_addresses_become_links_and_end_before_the_sentence_does():
    assert linkify("See https://example.org/a?b=1&c=2. Or http://x.example!") == (
        f"See {link('https://example.org/a?b=1&amp;c=2')}. Or {link('http://x.example')}!")
    assert linkify("(https://en.wikipedia.org/wiki/Foo_(bar))") == (
        f"({link('https://en.wikipedia.org/wiki/Foo_(bar)')})")


def test_each_line_break_is_kept():
    assert linkify("One\nhttps://x.example\r\n\nFour") == (
        f"One<br>\n{link('https://x.example')}<br>\n<br>\nFour")


def test_no_other_scheme_becomes_a_link_and_an_address_cannot_break_out_of_its_attribute():
    assert linkify("javascript:alert(1) data:text/html,x ftp://x") == (
        "javascript:alert(1) data:text/html,x ftp://x")
    assert linkify('https://x.example/"onmouseover="a') == (
        f'{link("https://x.example/")}&#34;onmouseover=&#34;a')
    assert linkify("https://x.example/<img>") == f"{link('https://x.example/')}&lt;img&gt;"
