"""A mail's links with a token (:func:`wikinotify.mail.compose.site_url`) are the URLs
werkzeug builds, though werkzeug builds only what comes before the token, once per site
and route."""

from __future__ import annotations

from wikinotify.host import SiteFacts
from wikinotify.mail import compose

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
