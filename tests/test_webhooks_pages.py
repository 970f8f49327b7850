"""The webhook and chat pages: ``/preferences/webhooks`` (a reader's own) and
``/admin/webhooks`` (site-wide), every action a form with its CSRF token, no JavaScript."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.web import csrf_token, login_with_csrf
from wikinotify.models import Delivery, Endpoint

PAGE = "/_notifications/preferences/webhooks"
ADMIN_PAGE = "/_notifications/admin/webhooks"
PREFIX = "/_notifications"


pytestmark = [
    # CSRF on, as a deployment runs it; the receiver's address allowed, as in the suite.
    pytest.mark.app_config(WTF_CSRF_ENABLED=True, WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"]),
]


def signed_in(client, username="alice") -> str:
    """Sign in; the page's CSRF token."""
    login_with_csrf(client, username)
    return csrf_token(client.get(PAGE).get_data(as_text=True))


def add(client, token, url="http://127.0.0.1:9/hook", **extra):
    data = {"csrf_token": token, "url": url, "categories": ["watchedPage", "mention"],
            "description": "build bot", **extra}
    return client.post(f"{PREFIX}/webhooks", data=data)


def endpoints_in_db(app) -> list[Endpoint]:
    with app.app_context():
        rows = list(db.session.scalars(sa.select(Endpoint).order_by(Endpoint.id)))
        db.session.expunge_all()
        return rows


def test_a_guest_is_sent_to_sign_in(client):
    assert client.get(PAGE).status_code == 302
    assert client.get(ADMIN_PAGE).status_code == 302


def test_the_page_works_without_javascript(client):
    signed_in(client)
    html = client.get(PAGE).get_data(as_text=True)
    assert "<script" not in html.split("<section class=\"wn-webhooks\">", 1)[1]
    forms = re.findall(r"<form[^>]*>", html)
    assert forms and all('method="post"' in form for form in forms)
    assert 'action="/_notifications/webhooks"' in html
    assert 'action="/_notifications/chat"' in html
    # The preferences page links here.
    assert PAGE in client.get(f"{PREFIX}/preferences").get_data(as_text=True)


def test_adding_shows_the_secret_once(app, client):
    token = signed_in(client)
    response = add(client, token)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    secret = re.search(r"whsec_[A-Za-z0-9+/=]+", html).group(0)
    assert response.headers["Cache-Control"] == "no-store"  # no cache keeps the secret
    (row,) = endpoints_in_db(app)
    assert row.url == "http://127.0.0.1:9/hook" and row.categories == ["watchedPage", "mention"]
    assert row.state == "unverified"
    later = client.get(PAGE).get_data(as_text=True)
    assert "http://127.0.0.1:9/hook" in later
    assert secret not in later and "whsec_" not in later


def test_a_refused_url_is_named_and_nothing_is_saved(app, client):
    token = signed_in(client)
    response = add(client, token, url="http://169.254.169.254/latest")
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert ("This URL is refused: it leads to a link-local address (169.254.169.254), where "
            "the wiki sends nothing.") in html
    assert 'value="http://169.254.169.254/latest"' in html  # what was typed, kept
    assert endpoints_in_db(app) == []


def test_a_form_without_its_token_changes_nothing(app, client):
    signed_in(client)
    response = client.post(f"{PREFIX}/webhooks",
                           data={"url": "http://127.0.0.1:9/", "categories": ["mention"]})
    assert response.status_code == 400
    assert endpoints_in_db(app) == []


def test_the_buttons(app, client):
    token = signed_in(client)
    add(client, token)
    (row,) = endpoints_in_db(app)

    def press(action):
        return client.post(f"{PREFIX}/webhooks/{row.id}/{action}", data={"csrf_token": token})

    tested = press("test")
    assert tested.status_code == 302
    assert "verification" in client.get(PAGE).get_data(as_text=True)  # unverified: resent
    assert press("disable").status_code == 302
    assert endpoints_in_db(app)[0].state == "disabled"
    assert press("enable").status_code == 302
    assert endpoints_in_db(app)[0].state == "unverified"  # never verified: verify again
    rotated = press("rotate")
    assert rotated.status_code == 200 and "whsec_" in rotated.get_data(as_text=True)
    assert rotated.headers["Cache-Control"] == "no-store"
    assert endpoints_in_db(app)[0].previous_secret_until is not None
    # A second rotation while the first one's old secret still signs is refused, saying why.
    again = press("rotate")
    assert again.status_code == 409 and "whsec_" not in again.get_data(as_text=True)
    assert "The previous secret still signs until" in again.get_data(as_text=True)
    assert press("nonsense").status_code == 404
    assert press("delete").status_code == 302
    assert endpoints_in_db(app) == []


def test_someone_elses_webhook_has_no_buttons(app, client):
    token = signed_in(client, "bob")
    add(client, token)
    (row,) = endpoints_in_db(app)
    token = signed_in(client, "alice")
    for action in ("delete", "disable", "rotate", "test"):
        response = client.post(f"{PREFIX}/webhooks/{row.id}/{action}", data={"csrf_token": token})
        assert response.status_code == 404
    assert client.get(f"{PREFIX}/webhooks/{row.id}/deliveries").status_code == 404
    assert "127.0.0.1:9" not in client.get(PAGE).get_data(as_text=True)
    assert endpoints_in_db(app)[0].state == "unverified"


def test_site_wide_webhooks_have_an_admin_page(app, client):
    token = signed_in(client, "alice")
    assert client.get(ADMIN_PAGE).status_code == 403
    assert add(client, token, scope="site").status_code == 403
    assert endpoints_in_db(app) == []

    token = signed_in(client, "admin")
    html = client.get(ADMIN_PAGE).get_data(as_text=True)
    assert 'name="scope" value="site"' in html
    assert "Apprise URL" not in html  # chat targets are a reader's own
    # Only categories anyone may hear of are offered; a reader's own page offers more.
    assert 'value="pageCreated"' in html and 'value="reviewRequested"' not in html
    assert 'value="reviewRequested"' in client.get(PAGE).get_data(as_text=True)
    assert ADMIN_PAGE in client.get(f"{PREFIX}/admin").get_data(as_text=True)
    response = add(client, token, scope="site", categories=["pageCreated"])
    assert response.status_code == 200 and "whsec_" in response.get_data(as_text=True)
    (row,) = endpoints_in_db(app)
    assert row.owner_id is None and row.categories == ["pageCreated"]
    assert "127.0.0.1:9" in client.get(ADMIN_PAGE).get_data(as_text=True)
    assert "127.0.0.1:9" not in client.get(PAGE).get_data(as_text=True)


def test_a_chat_target_is_added_and_shown_masked(app, client):
    token = signed_in(client)
    url = "ntfy://127.0.0.1:9/chat?token=s3cr3t-t0ken"
    response = client.post(f"{PREFIX}/chat", data={"csrf_token": token, "url": url})
    assert response.status_code == 302
    html = client.get(PAGE).get_data(as_text=True)
    (row,) = endpoints_in_db(app)
    assert row.kind == "chat" and row.target_hint in html
    assert "s3cr3t-t0ken" not in html
    refused = client.post(f"{PREFIX}/chat", data={"csrf_token": token, "url": "mmost://10.0.0.9/token"})
    assert refused.status_code == 400
    assert "it leads to a private address (10.0.0.9)" in refused.get_data(as_text=True)
    deleted = client.post(f"{PREFIX}/chat/{row.id}/delete", data={"csrf_token": token})
    assert deleted.status_code == 302
    assert endpoints_in_db(app) == []


def test_the_deliveries_page_goes_back_in_pages(app, client):
    token = signed_in(client)
    add(client, token)
    (row,) = endpoints_in_db(app)
    with app.app_context():
        db.session.add_all(
            Delivery(endpoint_id=row.id, message_id=f"msg_p_{n}", type="mention",
                     state="failed", attempts=8, response_code=503, latency_ms=12,
                     error_class="transient", error="HTTP 503")
            for n in range(60)
        )
        db.session.commit()
    first = client.get(f"{PREFIX}/webhooks/{row.id}/deliveries").get_data(as_text=True)
    assert first.count("data-delivery-id=") == 50
    assert "HTTP 503" in first and "12 ms" in first
    older = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = client.get(older).get_data(as_text=True)
    assert second.count("data-delivery-id=") == 11  # the rest, with the verification
    assert 'rel="next"' not in second
