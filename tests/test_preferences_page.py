"""The preferences page (docs/rules.md#the-preferences-page): grouped rows, both languages, the
hints and banners, and a form that works without JavaScript behind a CSRF token."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from demo.models import Site, User, db
from tests.helpers.web import csrf_token, login, login_with_csrf
from wikinotify.instance_settings import set_site_enabled
from wikinotify.models import Preference

PAGE = "/_notifications/preferences"


pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


def text(response) -> str:
    return response.get_data(as_text=True)


def alice_rows(app):
    with app.app_context():
        alice = db.session.scalar(sa.select(User.id).where(User.username == "alice"))
        rows = db.session.scalars(sa.select(Preference).where(Preference.user_id == str(alice)))
        return {(r.category, r.channel): r.enabled for r in rows}


def test_a_guest_is_sent_to_sign_in(client):
    response = client.get(PAGE)
    assert response.status_code == 302
    assert "/login" in response.headers["Location"]


def test_the_page_lists_every_category_under_its_heading(as_alice):
    html = text(as_alice.get(PAGE))
    headings = ["Pages you watch", "Discussions", "Reviews", "Everything on the wiki"]
    positions = [html.index(f"{h}\n") for h in headings]
    assert positions == sorted(positions)
    for title in ["Comments on pages you watch", "Mentions", "Replies to you", "Review requests",
                  "Answers to your suggestions", "New pages", "Deleted pages"]:
        assert title in html
    assert "These can be busy on a large wiki." in html
    assert 'name="watchedPage.email" id="watchedPage.email"' in html
    assert "Stop all email" in html
    # Defaults: watchedPage checked, pageCreated not.
    assert re.search(r'name="watchedPage\.inApp"[^>]*checked', html)
    assert not re.search(r'name="pageCreated\.inApp"[^>]*checked', html)


def test_the_page_speaks_french_to_a_french_account(client):
    login(client, "carol")  # carol's locale is fr
    html = text(client.get(PAGE))
    assert "Préférences de notification" in html
    assert "Pages que vous suivez" in html
    assert "Tout le wiki" in html
    assert "Arrêter tous les e-mails" in html
    assert "Pages you watch" not in html


def test_the_page_follows_the_browser_language_otherwise(as_alice):
    html = text(as_alice.get(PAGE, headers={"Accept-Language": "fr-FR,fr;q=0.9"}))
    assert "Mentions" in html and "Demandes de relecture" in html
    html = text(as_alice.get(PAGE, headers={"Accept-Language": "de-DE,de;q=0.9"}))
    assert "Prüfanfragen" in html
    html = text(as_alice.get(PAGE, headers={"Accept-Language": "es"}))  # not offered
    assert "Review requests" in html


def test_a_site_with_notifications_off_shows_a_banner(app, as_alice):
    assert "switched off on this site" not in text(as_alice.get(PAGE))
    with app.app_context():
        main = db.session.scalar(sa.select(Site.id).where(Site.is_default.is_(True)))
        set_site_enabled(db.session, str(main), False)
        db.session.commit()
    assert "switched off on this site" in text(as_alice.get(PAGE))


def test_the_form_saves_without_javascript(app, as_alice):
    form = {"watchedPage.inApp": "on", "watchedPageComment.inApp": "on",
            "watchedPageComment.email": "on", "mention.inApp": "on", "mention.email": "on",
            "commentReply.inApp": "on", "commentReply.email": "on",
            "reviewRequested.inApp": "on", "reviewRequested.email": "on",
            "suggestionReviewed.inApp": "on", "suggestionReviewed.email": "on",
            "pageCreated.inApp": "on", "announcement.inApp": "on", "announcement.email": "on",
            "action": "save"}
    response = as_alice.post(PAGE, data=form)
    assert response.status_code == 302
    assert alice_rows(app) == {("watchedPage", "email"): False, ("pageCreated", "inApp"): True}
    html = text(as_alice.get(PAGE))
    assert html.count("Your notification preferences are saved.") == 1  # said once, not twice
    assert not re.search(r'name="watchedPage\.email"[^>]*checked', html)


def test_stop_all_email_turns_every_email_off_and_keeps_in_app(app, as_alice):
    as_alice.post(PAGE, data={"action": "stop_all_email"})
    rows = alice_rows(app)
    assert rows == {(key, "email"): False for key in
                    ["watchedPage", "watchedPageComment", "mention", "commentReply",
                     "reviewRequested", "suggestionReviewed", "announcement"]}
    assert "Email notifications are off for every category." in text(as_alice.get(PAGE))


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False)
class TestWithoutMail:
    def test_the_email_column_is_disabled_with_a_hint(self, as_alice):
        html = text(as_alice.get(PAGE))
        assert "the administrator has not set up outgoing mail" in html
        assert re.search(r'name="mention\.email"[^>]*disabled', html)
        assert not re.search(r'name="mention\.email"[^>]*checked', html)


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True, WTF_CSRF_ENABLED=True)
class TestCsrf:
    def test_the_form_without_a_token_is_refused_and_stores_nothing(self, app, client):
        login_with_csrf(client, "alice")
        response = client.post(PAGE, data={"pageCreated.inApp": "on", "action": "save"})
        assert response.status_code == 400
        assert "session has expired" in text(response)
        assert alice_rows(app) == {}

    def test_the_form_with_its_token_is_accepted(self, app, client):
        login_with_csrf(client, "alice")
        token = csrf_token(text(client.get(PAGE)))
        response = client.post(
            PAGE, data={"pageCreated.inApp": "on", "action": "save", "csrf_token": token}
        )
        assert response.status_code == 302
        assert ("pageCreated", "inApp") in alice_rows(app)
