"""Every page that refuses a submission says why, per field, in the reader's language
(docs/languages.md#refusals): the sentence beside the field, which is marked invalid
(aria-invalid, aria-describedby), and in the summary at the top linking to it; marshmallow's
and the SSRF guard's English never shows. The API's answer stays English."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from demo.models import Site, db
from tests.helpers.web import login

PREFIX = "/_notifications"
LANGUAGES = ("en", "fr", "de")

pytestmark = [
    # What a page shows does not depend on the database: one app each, on PostgreSQL.
    pytest.mark.parametrize("database_url", ["postgresql"], indirect=True),
    pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True),
]


def in_language(client, language: str):
    client.environ_base["HTTP_ACCEPT_LANGUAGE"] = language
    return client


def text(response) -> str:
    return response.get_data(as_text=True)


def assert_refused(html: str, field_id: str, sentence: str, raw: str | None) -> None:
    """``field_id``'s control is marked invalid and described by its sentence, which the
    summary repeats as a link to it; the English reason behind it is nowhere."""
    control = re.search(rf'<(input|select)[^>]*id="{field_id}"[^>]*>', html)
    assert control, field_id
    assert 'aria-invalid="true"' in control.group(0)
    assert re.search(rf'aria-describedby="[^"]*\b{field_id}-error\b', control.group(0))
    assert f'<span class="wn-field-error" id="{field_id}-error">{sentence}</span>' in html
    assert re.search(rf'<a href="#{field_id}">[^<]*{re.escape(sentence)}</a>', html)
    assert raw is None or raw not in html


@pytest.fixture
def as_alice(client):
    login(client, "alice")
    return client


@pytest.fixture
def as_admin(client):
    login(client, "admin")
    return client


#: Her forms: where each posts, what, which field it refuses, saying what in each language,
#: and the English that never shows instead (None: English says the guard's own words).
FORMS = {
    "the email schedule": (
        "/preferences/schedule",
        {"cadence": "daily", "hour": "99", "weekday": "0", "timezone": "UTC"},
        "wn-hour", {
            "en": "Enter a whole number from 0 to 23.",
            "fr": "Saisissez un nombre entier de 0 à 23.",
            "de": "Geben Sie eine ganze Zahl von 0 bis 23 ein.",
        }, "Must be greater than or equal to"),
    "a webhook's URL": (
        "/webhooks", {"url": "http://10.0.0.9/hook", "categories": ["mention"]},
        "wn-webhook-url", {
            "en": "This URL is refused: it leads to a private address (10.0.0.9), where the "
                  "wiki sends nothing.",
            "fr": "Cette URL est refusée\u202f: elle mène à une adresse privée (10.0.0.9), où le "
                  "wiki n’envoie rien.",
            "de": "Diese URL wird abgelehnt: Die URL führt zu einer privaten Adresse (10.0.0.9), "
                  "wohin das Wiki nichts sendet.",
        }, "resolves to"),
    "a chat target's URL": (
        "/chat", {"url": "nothing-apprise-knows://x", "description": "phone"},
        "wn-chat-url", {
            "en": "This chat URL is refused: this is not a URL Apprise can send to.",
            "fr": "Cette URL de messagerie est refusée\u202f: Apprise ne sait pas envoyer à "
                  "cette URL.",
            "de": "Diese Messenger-URL wird abgelehnt: An diese URL kann Apprise nicht senden.",
        }, None),
}


@pytest.mark.parametrize("form", FORMS)
def test_her_forms(as_alice, form):
    path, data, field_id, sentences, raw = FORMS[form]
    for language in LANGUAGES:
        response = in_language(as_alice, language).post(f"{PREFIX}{path}", data=data)
        assert response.status_code == 400
        html = text(response)
        assert_refused(html, field_id, sentences[language],
                       raw=raw or ("not a URL Apprise can send to" if language != "en" else None))
        if form == "a webhook's URL":
            assert 'value="http://10.0.0.9/hook"' in html  # what she typed, kept
        if form == "a chat target's URL":
            # Her description is kept; the target's URL, which may hold a token, is not
            # shown back (as it is never shown once saved).
            assert 'value="phone"' in html and "nothing-apprise-knows" not in html


NO_CATEGORY = {
    "en": "Choose at least one category.",
    "fr": "Choisissez au moins une catégorie.",
    "de": "Wählen Sie mindestens eine Kategorie.",
}


def test_a_webhook_with_no_category(as_alice):
    """A list refused: its sentence is beside the fieldset, each box marked."""
    for language in LANGUAGES:
        response = in_language(as_alice, language).post(
            f"{PREFIX}/webhooks", data={"url": "https://hooks.example.org/wiki"})
        html = text(response)
        assert response.status_code == 400
        assert (f'<span class="wn-field-error" id="wn-webhook-categories-error">'
                f'{NO_CATEGORY[language]}</span>') in html
        assert re.search(r'<fieldset id="wn-webhook-categories"[^>]*'
                         r'aria-describedby="wn-webhook-categories-error"', html)
        assert re.search(r'<input type="checkbox" name="categories"[^>]*aria-invalid="true"',
                         html)


RETENTION = {
    "en": "Enter a whole number from 1 to 3650.",
    "fr": "Saisissez un nombre entier de 1 à 3650.",
    "de": "Geben Sie eine ganze Zahl von 1 bis 3650 ein.",
}


def test_the_admin_settings(app, as_admin):
    with app.app_context():
        main = str(db.session.scalar(sa.select(Site.id).where(Site.is_default.is_(True))))
    for language in LANGUAGES:
        response = in_language(as_admin, language).post(f"{PREFIX}/admin", data={
            "retentionDays": "0", "emailDelaySeconds": "60", "mailBatchSize": "100",
            f"site.{main}": "on"})
        assert response.status_code == 400
        assert_refused(text(response), "wn-retentionDays", RETENTION[language],
                       raw="Must be greater than or equal to")


MUTE = {
    "en": "What to mute: Choose one of the options offered.",
    "fr": "Ce qu’il faut mettre en sourdine\u202f: Choisissez l’une des options proposées.",
    "de": "Was stummgeschaltet werden soll: Wählen Sie eine der angebotenen Optionen.",
}
FILTER = {
    "en": "Category: Choose one of the options offered.",
    "fr": "Catégorie\u202f: Choisissez l’une des options proposées.",
    "de": "Kategorie: Wählen Sie eine der angebotenen Optionen.",
}


def test_the_answers_with_no_form_to_mark(as_alice):
    """A mute button and the inbox's filters send nothing she typed: a refusal is the
    wiki's own 400 page, saying it in her language."""
    for language in LANGUAGES:
        client = in_language(as_alice, language)
        response = client.post(f"{PREFIX}/mutes", data={"kind": "planet", "id": "mars"})
        assert response.status_code == 400
        assert MUTE[language] in text(response)
        assert "Must be one of" not in text(response)
        response = client.get(f"{PREFIX}/inbox?category=noSuchThing")
        assert response.status_code == 400
        assert FILTER[language] in text(response)


def test_the_api_keeps_its_english_whatever_the_language(as_alice):
    for language in LANGUAGES:
        response = in_language(as_alice, language).put(
            f"{PREFIX}/api/mutes", json={"kind": "planet", "id": "mars"})
        assert response.status_code == 400
        assert response.get_json()["error"]["message"] == "kind: Must be one of: page, user."
