"""``GET`` / ``PUT /api/preferences`` (docs/rules.md#the-preferences-page): defaults, round trip,
rows only where they differ, validation that stores nothing, audit, and email off while mail is not
set up."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from demo.models import AuditLog, User, db
from tests.helpers.web import full_map
from wikinotify.models import Preference

API = "/_notifications/api/preferences"
pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


def stored(app, username="alice"):
    with app.app_context():
        user_id = str(db.session.scalar(sa.select(User.id).where(User.username == username)))
        rows = db.session.scalars(sa.select(Preference).where(Preference.user_id == user_id))
        return {(r.category, r.channel): r.enabled for r in rows}


def audits(app):
    with app.app_context():
        return [
            (a.action, a.kind, a.details)
            for a in db.session.scalars(sa.select(AuditLog).order_by(AuditLog.id))
        ]


def test_a_guest_gets_401_json(client):
    for response in (client.get(API), client.put(API, json={"categories": {}})):
        assert response.status_code == 401
        assert response.get_json()["error"]["code"] == "unauthorized"


def test_get_answers_every_visible_category_with_defaults(as_alice):
    body = as_alice.get(API).get_json()
    assert body["emailAvailable"] is True
    assert body["siteEnabled"] is True
    assert body["emailSchedule"]["cadence"] == "immediate"
    by_key = {c["key"]: c for c in body["categories"]}
    assert set(by_key) == {
        "watchedPage",
        "watchedPageComment",
        "mention",
        "commentReply",
        "reviewRequested",
        "suggestionReviewed",
        "pageCreated",
        "pageDeleted",
        "announcement",
    }
    assert by_key["watchedPage"] | {"title": None, "description": None} == {
        "key": "watchedPage",
        "section": "watching",
        "title": None,
        "description": None,
        "optIn": False,
        "inApp": True,
        "email": True,
        "defaults": {"inApp": True, "email": True},
    }
    assert by_key["pageCreated"]["defaults"] == {"inApp": False, "email": False}
    assert by_key["pageCreated"]["optIn"] is True
    assert by_key["mention"]["title"] == "Mentions"


def test_put_round_trip_stores_only_differences(app, as_alice):
    body = full_map(as_alice, mention={"email": False}, pageCreated={"inApp": True})
    response = as_alice.put(API, json=body)
    assert response.status_code == 200
    by_key = {c["key"]: c for c in response.get_json()["categories"]}
    assert by_key["mention"]["email"] is False
    assert by_key["pageCreated"]["inApp"] is True
    assert stored(app) == {("mention", "email"): False, ("pageCreated", "inApp"): True}
    again = {c["key"]: c for c in as_alice.get(API).get_json()["categories"]}
    assert again["mention"]["email"] is False and again["mention"]["inApp"] is True


def test_setting_a_value_back_to_its_default_deletes_its_row(app, as_alice):
    as_alice.put(API, json=full_map(as_alice, mention={"email": False}))
    assert stored(app) == {("mention", "email"): False}
    as_alice.put(API, json=full_map(as_alice, mention={"email": True}))
    assert stored(app) == {}


def test_a_change_is_audited_with_the_categories_that_changed(app, as_alice):
    changes = {"mention": {"email": False}, "pageDeleted": {"inApp": True}}
    as_alice.put(API, json=full_map(as_alice, **changes))
    as_alice.put(API, json=full_map(as_alice))  # nothing changed: nothing audited
    entries = [a for a in audits(app) if a[0] == "updateNotificationPrefs"]
    assert entries == [
        ("updateNotificationPrefs", "profile", {"categories": ["mention", "pageDeleted"]})
    ]


def test_preferences_are_the_callers_own(app, client):
    from tests.helpers.web import login

    login(client, "alice")
    client.put(API, json=full_map(client, mention={"email": False}))
    client.post("/logout")
    login(client, "bob")
    by_key = {c["key"]: c for c in client.get(API).get_json()["categories"]}
    assert by_key["mention"]["email"] is True
    assert stored(app, "bob") == {}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m: m["categories"].update(nonsense={"inApp": True, "email": True}),
         "categories.nonsense"),
        (lambda m: m["categories"]["mention"].update(sms=True), "categories.mention.sms"),
        (lambda m: m["categories"]["mention"].update(email="yes"), "categories.mention.email"),
        (lambda m: m["categories"]["mention"].update(email=1), "categories.mention.email"),
        (lambda m: m["categories"]["mention"].pop("inApp"), "categories.mention.inApp"),
        (lambda m: m["categories"].pop("watchedPage"), "categories.watchedPage"),
        (lambda m: m.pop("categories"), "categories"),
        (lambda m: m.update(emailSchedule="hourly"), "emailSchedule"),
        (lambda m: m.update(extra=1), "extra"),
    ],
)
def test_a_bad_body_is_400_naming_the_field_and_stores_nothing(app, as_alice, mutate, field):
    body = full_map(as_alice, pageCreated={"inApp": True})  # a real change rides along
    mutate(body)
    response = as_alice.put(API, json=body)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"], error
    assert error["message"].startswith(field)
    assert stored(app) == {}
    assert audits(app) == []


def test_a_body_that_is_not_an_object_is_400(app, as_alice):
    response = as_alice.put(API, json=["watchedPage"])
    assert response.status_code == 400
    fields = response.get_json()["error"]["fields"]
    assert fields == {"_schema": ["The body must be a JSON object."]}
    response = as_alice.put(API, data="categories", content_type="text/plain")
    assert response.status_code == 415
    assert response.get_json()["error"]["code"] == "unsupported_media_type"
    assert stored(app) == {}


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False)
class TestWithoutMail:
    def test_every_email_preference_reads_off(self, as_alice):
        body = as_alice.get(API).get_json()
        assert body["emailAvailable"] is False
        assert all(c["email"] is False for c in body["categories"])
        assert all(c["defaults"]["email"] is False for c in body["categories"])

    def test_saving_leaves_the_stored_email_choice_alone(self, app, as_alice):
        with app.app_context():
            alice = db.session.scalar(sa.select(User.id).where(User.username == "alice"))
            db.session.add(Preference(user_id=str(alice), category="pageCreated",
                                      channel="email", enabled=True))
            db.session.commit()
        response = as_alice.put(API, json=full_map(as_alice, mention={"inApp": False}))
        assert response.status_code == 200
        assert stored(app) == {("pageCreated", "email"): True, ("mention", "inApp"): False}
