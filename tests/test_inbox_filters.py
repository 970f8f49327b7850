"""The inbox's filters, in the API and on the page (docs/rules.md#the-inbox-api,
docs/rules.md#the-inbox-page): by category, by page and unread, combined, with the keyset
cursor bound to the list it came from, and an honest sentence for each empty list."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from demo import wiki
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import edit, many_watched_edits, page, user

API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"


@pytest.fixture
def mixed(app):
    """Alice: 33 edits of pages she watches (Onboarding among them), a mention on Home,
    and Bob's comment on Onboarding. Returns Onboarding's page id."""
    with app.app_context():
        many_watched_edits(32)
        edit("handbook/onboarding", "bob", "v2")
        wiki.add_comment(page("home"), user("carol"), "@alice over to you")
        wiki.add_comment(page("handbook/onboarding"), user("bob"), "Laptops?")
        onboarding = page("handbook/onboarding").id
    run_jobs(app)
    return str(onboarding)


def _all(client, **query):
    """Every entry of the filtered list, following the cursor; and the page sizes."""
    items, sizes, cursor = [], [], None
    while True:
        response = client.get(API, query_string={**query, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.get_json()
        body = response.get_json()
        items += body["items"]
        sizes.append(len(body["items"]))
        cursor = body["nextCursor"]
        if cursor is None:
            return items, sizes


def test_filters_combine_and_the_cursor_keeps_to_its_list(app, mixed, as_alice):
    everything, sizes = _all(as_alice)
    assert sizes == [30, 5]
    watched, sizes = _all(as_alice, category="watchedPage")
    assert sizes == [30, 3] and {i["category"] for i in watched} == {"watchedPage"}
    [mention], _ = _all(as_alice, category="mention")
    assert mention["text"].startswith("Carol")
    about, _ = _all(as_alice, pageId=mixed)
    assert {i["category"] for i in about} == {"watchedPage", "watchedPageComment"}
    assert {i["page"]["id"] for i in about} == {mixed}
    [edited], _ = _all(as_alice, pageId=mixed, category="watchedPage")
    assert as_alice.put(f"{API}/{edited['id']}/read", json={}).status_code == 204
    assert _all(as_alice, pageId=mixed, category="watchedPage", unread="true")[0] == []
    unread, sizes = _all(as_alice, category="watchedPage", unread="true")
    assert sizes == [30, 2] and edited["id"] not in {i["id"] for i in unread}
    # Another list's cursor is refused, not followed into a list it was not given for.
    first = as_alice.get(API, query_string={"category": "watchedPage"}).get_json()
    for other in ({}, {"category": "mention"}, {"category": "watchedPage", "unread": "1"},
                  {"category": "watchedPage", "pageId": mixed}):
        bad = as_alice.get(API, query_string={**other, "cursor": first["nextCursor"]})
        assert bad.status_code == 400 and list(bad.get_json()["error"]["fields"]) == ["cursor"]


def test_an_unknown_category_or_an_overlong_page_id_is_a_400_naming_it(app, as_alice):
    bad = as_alice.get(API, query_string={"category": "watchedPages"})
    assert bad.status_code == 400
    assert bad.get_json()["error"]["message"].startswith("category:")
    assert list(bad.get_json()["error"]["fields"]) == ["category"]
    long = as_alice.get(API, query_string={"pageId": "x" * 65})
    assert long.status_code == 400 and list(long.get_json()["error"]["fields"]) == ["pageId"]
    assert as_alice.get(INBOX, query_string={"category": "nope"}).status_code == 400
    # An empty value is no filter (the page's "All categories").
    assert as_alice.get(API, query_string={"category": "", "pageId": ""}).status_code == 200


def test_another_readers_page_id_reveals_nothing(app, client):
    with app.app_context():
        edit("handbook/onboarding", "bob", "v2")  # Alice watches it; Carol does not
        onboarding = str(page("handbook/onboarding").id)
    run_jobs(app)
    login(client, "carol")
    theirs = client.get(API, query_string={"pageId": onboarding})
    missing = client.get(API, query_string={"pageId": "no-such-page"})
    assert theirs.status_code == missing.status_code == 200
    assert theirs.get_json() == missing.get_json() == {"items": [], "nextCursor": None}


def _links(html: str) -> list[str]:
    return [html_lib.unescape(h) for h in re.findall(r'href="([^"]*)"', html)]


def test_the_page_keeps_its_filters_in_every_link(app, mixed, as_alice):
    html = as_alice.get(INBOX, query_string={"category": "watchedPage", "unread": "1"}
                        ).get_data(as_text=True)
    assert '<option value="watchedPage" selected>' in html
    assert re.search(r'name="unread" value="1" checked', html)
    links = _links(html)
    older = next(h for h in links if "cursor=" in h)
    assert "category=watchedPage" in older and "unread=1" in older
    only = next(h for h in links if f"page={mixed}" in h)
    assert "category=watchedPage" in only and "unread=1" in only
    # The older page follows its cursor within the same filters.
    assert as_alice.get(older).status_code == 200
    # The page filter is a removable chip; the entries link nowhere narrower.
    narrowed = as_alice.get(only).get_data(as_text=True)
    assert 'class="wn-chip"' in narrowed and f'name="page" value="{mixed}"' in narrowed
    assert "Only this page" not in narrowed
    remove = next(h for h in _links(narrowed) if "Remove the page filter" in narrowed
                  and "category=watchedPage" in h and "page=" not in h and "cursor" not in h)
    assert as_alice.get(remove).status_code == 200
    # The live refresh reloads the same filtered list.
    entries_url = html_lib.unescape(re.search(r'data-entries-url="([^"]*)"', narrowed).group(1))
    assert f"page={mixed}" in entries_url and "category=watchedPage" in entries_url
    fragment = as_alice.get(entries_url).get_data(as_text=True)
    assert fragment.count('class="wn-entry') == 1


EMPTY = [
    ({"unread": "1"}, "No unread notifications", "Aucune notification non lue"),
    ({"page": "no-such-page"}, "Nothing about this page", "Rien au sujet de cette page"),
    ({"category": "mention"}, "No Mentions notifications",
     "Aucune notification «\u202fMentions\u202f»"),
]


def test_an_empty_filtered_inbox_says_what_it_was_filtered_to(app, as_alice):
    with app.app_context():
        edit("handbook/onboarding", "bob", "v2")
    run_jobs(app)
    [entry] = as_alice.get(API).get_json()["items"]
    as_alice.put(f"{API}/{entry['id']}/read", json={})
    for query, english, french in EMPTY:
        en = as_alice.get(INBOX, query_string=query).get_data(as_text=True)
        fr = as_alice.get(INBOX, query_string=query, headers={"Accept-Language": "fr"}
                          ).get_data(as_text=True)
        assert _empty(en) == english and _empty(fr) == french, query


def _empty(html: str) -> str:
    """The sentence of the inbox's empty list."""
    return html_lib.unescape(re.search(r'<p class="wn-empty">(.*?)</p>', html, re.S).group(1))
