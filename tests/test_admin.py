"""Admin → Notifications (docs/rules.md#instance-settings, docs/rules.md#admin-notifications):
administrators only, the settings round trip with its audit, validation that stores nothing, the
site switches, the status figures, the plain-http warning, and an unsubscribe secret that no answer
ever contains."""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from demo.models import AuditLog, Site, User, db
from tests.helpers.jobs import run_jobs
from tests.helpers.rq_registry import registered_cron, registered_worker
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import edit, set_delay, watch
from wikinotify import admin, vitals
from wikinotify.instance_settings import instance_settings
from wikinotify.mail.setup import MAIL_SWITCHED_OFF, NO_SENDER
from wikinotify.models import Event, Notification, SiteSwitch, utcnow
from wikinotify.queue import queue_names
from wikinotify.state import state

API = "/_notifications/api/admin/settings"
PAGE = "/_notifications/admin"
DEFAULTS = {"retentionDays": 90, "emailDelaySeconds": 180, "mailBatchSize": 100}


pytestmark = pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True)


@pytest.fixture
def as_admin(client):
    login(client, "admin")
    return client


def text(response) -> str:
    return response.get_data(as_text=True)


def site_id(app, title: str) -> str:
    with app.app_context():
        return str(db.session.scalar(sa.select(Site.id).where(Site.title == title)))


def stored(app) -> dict:
    """The three settings and the stored switches, as the database holds them."""
    with app.app_context():
        row = instance_settings(db.session)
        query = sa.select(SiteSwitch.site_id, SiteSwitch.enabled)
        switches = dict(db.session.execute(query).all())
        db.session.commit()
        return {**{name: getattr(row, column) for name, column in admin.SETTING_COLUMNS.items()},
                "switches": switches}


def audits(app) -> list[tuple]:
    with app.app_context():
        return [
            (a.action, a.kind, a.actor_id, a.details)
            for a in db.session.scalars(sa.select(AuditLog).order_by(AuditLog.id))
        ]


def admin_id(app) -> str:
    with app.app_context():
        return str(db.session.scalar(sa.select(User.id).where(User.username == "admin")))


UNCHANGED = {**DEFAULTS, "switches": {}}


# -- who may open it ----------------------------------------------------------------------


def test_a_guest_gets_401_json_on_the_api(client):
    for response in (client.get(API), client.put(API, json=DEFAULTS)):
        assert response.status_code == 401
        assert response.get_json()["error"]["code"] == "unauthorized"


def test_a_guest_is_sent_to_sign_in_from_the_page(client):
    for response in (client.get(PAGE), client.post(PAGE, data=DEFAULTS)):
        assert response.status_code == 302
        assert "/login" in response.headers["Location"]


def test_a_signed_in_non_administrator_gets_403_and_changes_nothing(app, as_alice):
    for response in (as_alice.get(API), as_alice.put(API, json={**DEFAULTS, "mailBatchSize": 5})):
        assert response.status_code == 403
        assert response.get_json()["error"]["code"] == "forbidden"
    assert as_alice.get(PAGE).status_code == 403
    assert as_alice.post(PAGE, data={**DEFAULTS, "mailBatchSize": "5"}).status_code == 403
    assert stored(app) == UNCHANGED
    assert audits(app) == []


def test_an_administrator_opens_the_page_and_the_api(as_admin):
    assert as_admin.get(API).status_code == 200
    html = text(as_admin.get(PAGE))
    assert "Notifications administration" in html
    assert 'name="mailBatchSize"' in html


def test_the_wiki_links_to_the_page_for_administrators_only(client):
    login(client, "alice")
    assert PAGE not in text(client.get("/"))
    client.post("/logout")
    login(client, "admin")
    assert f'href="{PAGE}"' in text(client.get("/"))


@pytest.mark.parametrize("own_page", ["/_notifications/inbox", "/_notifications/preferences"])
def test_wikinotifys_own_pages_link_to_it_for_administrators_only(client, own_page):
    login(client, "alice")
    assert PAGE not in text(client.get(own_page))
    client.post("/logout")
    login(client, "admin")
    assert f'href="{PAGE}"' in text(client.get(own_page))


# -- the API ------------------------------------------------------------------------------


def test_get_answers_the_settings_the_sites_and_the_status(app, as_admin):
    body = as_admin.get(API).get_json()
    assert set(body) == {"retentionDays", "emailDelaySeconds", "mailBatchSize", "sites",
                         "status"}
    assert {k: body[k] for k in DEFAULTS} == DEFAULTS
    assert body["sites"] == [
        {"id": site_id(app, "Main wiki"), "title": "Main wiki", "enabled": True, "https": False},
        {"id": site_id(app, "Docs"), "title": "Docs", "enabled": True, "https": False},
    ]
    status = body["status"]
    assert set(status) == {"mailConfigured", "mailProblem", "mailSettingsUrl", "mailAlert",
                           "countCap", "vitals", "warnings", "outbox", "email", "failures",
                           "failedEvents", "failedDeliveries", "plainHttpSites"}
    assert (status["mailConfigured"], status["mailProblem"]) == (True, None)
    assert status["outbox"] == {"unprocessed": 0, "oldestAgeSeconds": None}
    assert {k: v for k, v in status["email"].items() if k != "hours"} == {
        "sent": 0, "failed": 0, "notificationsEmailed": 0, "pending": 0, "pendingDue": 0}
    assert len(status["email"]["hours"]) == 24
    assert status["failures"] == []
    assert status["failedEvents"] == []
    assert status["failedDeliveries"] == []


def secret_forms(app) -> list[str]:
    """The unsubscribe secret as any answer might spell it."""
    with app.app_context():
        secret = instance_settings(db.session).unsubscribe_secret
        db.session.commit()
    return [
        secret.hex(),
        secret.hex().upper(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
    ]


def test_no_answer_contains_the_unsubscribe_secret(app, as_admin):
    forms = secret_forms(app)
    answers = [
        as_admin.get(API),
        as_admin.put(API, json={**DEFAULTS, "mailBatchSize": 7}),
        as_admin.put(API, json={**DEFAULTS, "mailBatchSize": 0}),
        as_admin.get(PAGE),
        as_admin.post(PAGE, data={**DEFAULTS, "mailBatchSize": "0"}),
        as_admin.post(PAGE, data=DEFAULTS, follow_redirects=True),
    ]
    for response in answers:
        body = text(response)
        assert "secret" not in body.lower(), response.request.path
        assert not any(form in body for form in forms), response.request.path


def test_the_secret_cannot_be_set_through_the_api(app, as_admin):
    forms = secret_forms(app)
    response = as_admin.put(API, json={**DEFAULTS, "unsubscribeSecret": "00" * 32})
    assert response.status_code == 400
    assert list(response.get_json()["error"]["fields"]) == ["unsubscribeSecret"]
    assert not any(form in text(response) for form in forms)
    assert secret_forms(app) == forms


def test_put_round_trip_is_audited_once_with_the_fields_that_changed(app, as_admin):
    response = as_admin.put(API, json={**DEFAULTS, "retentionDays": 30, "mailBatchSize": 500})
    assert response.status_code == 200
    answer = response.get_json()
    assert (answer["retentionDays"], answer["emailDelaySeconds"], answer["mailBatchSize"]) == (
        30, 180, 500)
    assert "status" not in answer
    assert stored(app) == {**UNCHANGED, "retentionDays": 30, "mailBatchSize": 500}
    again = as_admin.get(API).get_json()
    assert (again["retentionDays"], again["mailBatchSize"]) == (30, 500)
    # The same values again change nothing, so nothing more is audited.
    as_admin.put(API, json={**DEFAULTS, "retentionDays": 30, "mailBatchSize": 500})
    assert audits(app) == [("updateNotificationSettings", "admin", admin_id(app),
                            {"fields": ["retentionDays", "mailBatchSize"]})]


def test_the_extremes_of_each_range_are_accepted(app, as_admin):
    for values in ({"retentionDays": 1, "emailDelaySeconds": 0, "mailBatchSize": 1},
                   {"retentionDays": 3650, "emailDelaySeconds": 86400, "mailBatchSize": 1000}):
        assert as_admin.put(API, json=values).status_code == 200
        assert stored(app) == {**values, "switches": {}}


def _docs(body: dict) -> str:
    return body["sites"][0]["id"]


BAD_BODIES = [
    (lambda b: b.update(mailBatchSize=0), "mailBatchSize"),
    (lambda b: b.update(mailBatchSize=1001), "mailBatchSize"),
    (lambda b: b.update(mailBatchSize=True), "mailBatchSize"),
    (lambda b: b.update(mailBatchSize="100"), "mailBatchSize"),
    (lambda b: b.update(mailBatchSize=100.5), "mailBatchSize"),
    (lambda b: b.update(mailBatchSize=100.0), "mailBatchSize"),
    (lambda b: b.update(mailBatchSize=None), "mailBatchSize"),
    (lambda b: b.pop("mailBatchSize"), "mailBatchSize"),
    (lambda b: b.update(retentionDays=0), "retentionDays"),
    (lambda b: b.update(retentionDays=3651), "retentionDays"),
    (lambda b: b.update(retentionDays=False), "retentionDays"),
    (lambda b: b.pop("retentionDays"), "retentionDays"),
    (lambda b: b.update(emailDelaySeconds=-1), "emailDelaySeconds"),
    (lambda b: b.update(emailDelaySeconds=86401), "emailDelaySeconds"),
    (lambda b: b.update(emailDelaySeconds="180"), "emailDelaySeconds"),
    (lambda b: b["sites"].append({"id": "999", "enabled": True}), "sites.1.id"),
    (lambda b: b["sites"].append({"id": _docs(b), "enabled": True}), "sites.1.id"),
    (lambda b: b["sites"][0].update(enabled="no"), "sites.0.enabled"),
    (lambda b: b["sites"][0].update(enabled=0), "sites.0.enabled"),
    (lambda b: b["sites"][0].pop("enabled"), "sites.0.enabled"),
    (lambda b: b["sites"][0].update(title="Docs"), "sites.0.title"),
    (lambda b: b["sites"][0].update(id=int(_docs(b))), "sites.0.id"),
    (lambda b: b.update(sites="all"), "sites"),
    (lambda b: b.update(sites=None), "sites"),
    (lambda b: b.update(status={}), "status"),
    (lambda b: b.update(extra=1), "extra"),
]


@pytest.mark.parametrize(("mutate", "field"), BAD_BODIES)
def test_a_bad_body_is_400_naming_the_field_and_stores_nothing(app, as_admin, mutate, field):
    # Real changes ride along, to show that none of them is stored either.
    body = {"retentionDays": 30, "emailDelaySeconds": 60, "mailBatchSize": 500,
            "sites": [{"id": site_id(app, "Docs"), "enabled": False}]}
    mutate(body)
    response = as_admin.put(API, json=body)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"], error
    assert error["message"].startswith(field)
    assert stored(app) == UNCHANGED
    assert audits(app) == []


def test_a_body_that_is_not_an_object_is_400(app, as_admin):
    response = as_admin.put(API, json=[DEFAULTS])
    assert response.status_code == 400
    fields = response.get_json()["error"]["fields"]
    assert fields == {"_schema": ["The body must be a JSON object."]}
    response = as_admin.put(API, data="mailBatchSize=5", content_type="text/plain")
    assert response.status_code == 415
    assert stored(app) == UNCHANGED


def test_a_site_is_switched_off_and_on_through_the_api(app, as_admin):
    docs = site_id(app, "Docs")
    response = as_admin.put(API, json={**DEFAULTS, "sites": [{"id": docs, "enabled": False}]})
    assert response.status_code == 200
    assert {s["id"]: s["enabled"] for s in response.get_json()["sites"]} == {
        site_id(app, "Main wiki"): True, docs: False}
    assert stored(app)["switches"] == {docs: False}
    as_admin.put(API, json={**DEFAULTS, "sites": [{"id": docs, "enabled": True}]})
    assert stored(app)["switches"] == {docs: True}
    assert [a[3] for a in audits(app)] == [{"fields": [f"site:{docs}"]}] * 2
    # Sites left out of the body keep their switch.
    as_admin.put(API, json={**DEFAULTS, "mailBatchSize": 3})
    assert stored(app)["switches"] == {docs: True}


# -- the form (no JavaScript) ------------------------------------------------------------


def test_the_form_saves_settings_and_switches_then_redirects(app, as_admin):
    main, docs = site_id(app, "Main wiki"), site_id(app, "Docs")
    form = {"retentionDays": "30", "emailDelaySeconds": " 60 ", "mailBatchSize": "250",
            f"site.{main}": "on"}
    response = as_admin.post(PAGE, data=form)
    assert response.status_code == 302
    assert response.headers["Location"].endswith(PAGE)
    assert stored(app) == {"retentionDays": 30, "emailDelaySeconds": 60, "mailBatchSize": 250,
                           "switches": {docs: False}}
    html = text(as_admin.get(PAGE))
    assert html.count("The notification settings are saved.") == 1  # said once, not twice
    assert re.search(rf'name="site\.{main}"[^>]*checked', html)
    assert not re.search(rf'name="site\.{docs}"[^>]*checked', html)
    assert 'value="250"' in html
    as_admin.post(PAGE, data=form)
    assert "Nothing changed." in text(as_admin.get(PAGE))
    assert [a[3] for a in audits(app)] == [
        {"fields": ["retentionDays", "emailDelaySeconds", "mailBatchSize", f"site:{docs}"]}]


@pytest.mark.parametrize(("name", "value", "sentence"), [
    ("retentionDays", "0", "Enter a whole number from 1 to 3650."),
    ("mailBatchSize", "lots", "Enter a whole number."),
    ("emailDelaySeconds", "1.5", "Enter a whole number."),
    ("mailBatchSize", "", "Enter a whole number."),
])
def test_a_bad_form_value_is_shown_again_and_stores_nothing(app, as_admin, name, value,
                                                             sentence):
    main = site_id(app, "Main wiki")
    form = {"retentionDays": "30", "emailDelaySeconds": "60", "mailBatchSize": "250",
            f"site.{main}": "on", name: value}
    response = as_admin.post(PAGE, data=form)
    assert response.status_code == 400
    html = text(response)
    assert "Nothing was saved" in html
    assert re.search(rf'name="{name}" value="{re.escape(value)}"', html)
    assert re.search(rf'<p class="wn-field wn-invalid">\s*<label for="wn-{name}"', html)
    # The field's own sentence (wikinotify/refusals.py), beside it and in the summary.
    assert re.search(rf'id="wn-{name}"[^>]*aria-describedby="wn-{name}-hint wn-{name}-error"'
                     rf'[^>]*aria-invalid="true"', html)
    assert f'<span class="wn-field-error" id="wn-{name}-error">{sentence}</span>' in html
    assert f'<a href="#wn-{name}">' in html
    assert stored(app) == UNCHANGED
    assert audits(app) == []


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True, WTF_CSRF_ENABLED=True)
class TestCsrf:
    def test_the_form_without_a_token_is_refused_and_stores_nothing(self, app, client):
        login_with_csrf(client, "admin")
        response = client.post(PAGE, data={**DEFAULTS, "mailBatchSize": "5"})
        assert response.status_code == 400
        assert "session has expired" in text(response)
        assert stored(app) == UNCHANGED

    def test_the_form_with_its_token_is_accepted(self, app, client):
        login_with_csrf(client, "admin")
        token = csrf_token(text(client.get(PAGE)))
        data = {**DEFAULTS, "mailBatchSize": "5", "csrf_token": token}
        assert client.post(PAGE, data=data).status_code == 302
        assert stored(app)["mailBatchSize"] == 5

    def test_the_json_api_needs_no_token(self, app, client):
        login_with_csrf(client, "admin")
        assert client.put(API, json={**DEFAULTS, "mailBatchSize": 6}).status_code == 200
        assert stored(app)["mailBatchSize"] == 6


# -- the status ---------------------------------------------------------------------------


def _entry(n: int, email_state: str, **columns) -> Notification:
    return Notification(user_id=columns.pop("user_id", "1"), site_id="1", category="watchedPage",
                        variant="edited", group_key=f"test:{n}", last_event_id=n, in_app=True,
                        email_state=email_state, **columns)


@pytest.fixture
def busy_queue(app):
    """Two events waiting (the oldest 2 h), mail sent (one a digest of two) and failed
    inside and outside the 24-hour window, three mails not yet out (one due), and a
    failure whose reason looks like HTML."""
    now = utcnow()

    def ago(**delta) -> datetime:
        return now - timedelta(**delta)

    with app.app_context():
        alice = str(db.session.scalar(sa.select(User.id).where(User.username == "alice")))
        db.session.add_all([
            Event(kind="page:edit", origin="user", created_at=ago(hours=2)),
            Event(kind="page:edit", origin="user", created_at=ago(minutes=10)),
            Event(kind="page:edit", origin="user", created_at=ago(days=3),
                  processed_at=ago(days=3)),
            _entry(1, "sent", emailed_at=ago(minutes=30)),
            _entry(11, "sent", emailed_at=ago(minutes=30)),  # with 1: a digest, one mail
            _entry(2, "sent", emailed_at=ago(hours=5, minutes=30)),
            _entry(3, "sent", emailed_at=ago(hours=25)),
            _entry(4, "failed", emailed_at=ago(hours=3, minutes=30), user_id=alice,
                   email_error="<script>alert(1)</script> 550 mailbox full"),
            _entry(5, "failed", emailed_at=ago(hours=30), email_error="old failure"),
            _entry(6, "pending", email_after=now + timedelta(minutes=2)),
            _entry(7, "pending", email_after=ago(minutes=1)),
            _entry(10, "sending", email_after=now + timedelta(minutes=8)),  # under a lease
            _entry(8, "skipped"),
            _entry(9, "none"),
        ])
        db.session.commit()
    return now


def test_the_status_counts_the_outbox_and_the_mail_of_the_last_24_hours(app, busy_queue):
    with app.app_context():
        status = admin.status(db.session, state().host, now=busy_queue)
    assert status["outbox"] == {"unprocessed": 2, "oldestAgeSeconds": 7200}
    email = status["email"]
    assert (email["sent"], email["failed"], email["pending"], email["pendingDue"]) == (2, 1, 3, 1)
    assert email["notificationsEmailed"] == 3  # the digest's two, and one
    hours = email["hours"]
    assert hours[0]["start"] == busy_queue - timedelta(hours=24)
    assert [h["sent"] for h in hours] == [0] * 18 + [1] + [0] * 4 + [1]
    assert [h["failed"] for h in hours] == [0] * 20 + [1] + [0] * 3
    assert [(f["id"] > 0, f["error"]) for f in status["failures"]] == [
        (True, "<script>alert(1)</script> 550 mailbox full"), (True, "old failure")]


def test_the_api_answers_the_status(app, busy_queue, as_admin):
    status = as_admin.get(API).get_json()["status"]
    assert status["outbox"]["unprocessed"] == 2
    assert 7200 <= status["outbox"]["oldestAgeSeconds"] < 7300
    assert (status["email"]["sent"], status["email"]["failed"]) == (2, 1)
    [first, second] = status["failures"]
    assert set(first) == {"id", "category", "userId", "error", "errorClass", "at"}
    assert first["category"] == "watchedPage"
    assert first["error"].startswith("<script>")
    assert second["error"] == "old failure"


def test_the_page_shows_the_status_with_reasons_escaped(app, busy_queue, as_admin):
    html = text(as_admin.get(PAGE))
    assert "2 events waiting for fan-out" in html
    assert "The oldest has waited 2 hours." in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; 550 mailbox full" in html
    assert "<script>alert(1)" not in html
    assert "Alice Liddell" in html  # the recipient by name
    summary = "Emails over the last 24 hours, by hour: 2 sent, 1 failed."
    assert f'role="img" aria-label="{summary}"' in html
    assert f"<title>{summary}</title>" in html
    assert html.count('class="wn-bar-sent"') == 2
    assert html.count('class="wn-bar-failed"') == 1
    assert html.count('class="wn-hit"') == 24


@pytest.mark.app_config(smtp=True)
class TestMailsAreCountedAsMails:
    """docs/rules.md#admin-notifications: "Emails sent" counts mails, not the notifications they
    carry."""

    def test_a_digest_of_two_and_a_single_mail_are_two_emails_and_three_notifications(
            self, app, smtp, as_admin):
        with app.app_context():
            set_delay(0)
            watch("home", "alice")  # and handbook/onboarding (the seed): a digest of two
            watch("home", "carol")  # one mail of one
            edit("handbook/onboarding", "bob", "One")
            edit("home", "bob", "Two")
            run_jobs(app)
        assert sorted(smtp.inbox.recipients) == ["alice@example.com", "carol@example.com"]
        email = as_admin.get(API).get_json()["status"]["email"]
        assert (email["sent"], email["notificationsEmailed"]) == (2, 3)
        assert sum(hour["sent"] for hour in email["hours"]) == 2
        figures = re.sub(r"\s+", " ", text(as_admin.get(PAGE)))
        assert "<dt>Emails sent, last 24 hours</dt> <dd> 2 " in figures
        assert "<dt>Notifications emailed, last 24 hours</dt> <dd>3</dd>" in figures


def test_the_backlog_count_stops_at_the_cap(app, monkeypatch, as_admin):
    monkeypatch.setattr(vitals, "COUNT_CAP", 3)
    with app.app_context():
        db.session.add_all([Event(kind="page:edit", origin="user") for _ in range(5)])
        db.session.commit()
    status = as_admin.get(API).get_json()["status"]
    assert (status["outbox"]["unprocessed"], status["countCap"]) == (3, 3)
    assert "3+ events waiting for fan-out" in text(as_admin.get(PAGE))


def test_plain_http_sites_are_warned_about(app, as_admin):
    warning = "Gmail ignores one-click unsubscribe for http links"
    html = text(as_admin.get(PAGE))
    assert warning in html
    assert "http://localhost:5000" in html and "http://docs.localhost:5000" in html
    body = as_admin.get(API).get_json()
    assert [s["title"] for s in body["status"]["plainHttpSites"]] == ["Main wiki", "Docs"]
    with app.app_context():
        db.session.execute(sa.update(Site).where(Site.title == "Main wiki")
                           .values(base_url="https://wiki.example.org"))
        db.session.commit()
    body = as_admin.get(API).get_json()
    assert [s["title"] for s in body["status"]["plainHttpSites"]] == ["Docs"]
    assert {s["title"]: s["https"] for s in body["sites"]} == {"Main wiki": True, "Docs": False}
    with app.app_context():
        db.session.execute(sa.update(Site).values(base_url="https://example.org"))
        db.session.commit()
    assert warning not in text(as_admin.get(PAGE))
    assert as_admin.get(API).get_json()["status"]["plainHttpSites"] == []


def test_the_page_speaks_french(as_admin):
    html = text(as_admin.get(PAGE, headers={"Accept-Language": "fr"}))
    assert "Administration des notifications" in html
    assert "Notifications administration" not in html


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False)
class TestWithoutMail:
    def test_the_status_says_mail_is_not_configured_and_the_one_true_reason(self, as_admin):
        status = as_admin.get(API).get_json()["status"]
        assert (status["mailConfigured"], status["mailProblem"]) == (False, MAIL_SWITCHED_OFF)
        html = text(as_admin.get(PAGE))
        assert "Not configured" in html
        assert "WIKINOTIFY_MAIL_ENABLED is False" in html
        assert "MAIL_DEFAULT_SENDER" not in html  # the wiki has one; that is not why


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False,
                        WIKINOTIFY_MAIL_SETTINGS_URL="/admin/mail?tab=smtp&x=<b>")
def test_the_reason_links_to_where_the_wiki_configures_mail_in_both_languages(as_admin):
    assert as_admin.get(API).get_json()["status"]["mailSettingsUrl"] == (
        "/admin/mail?tab=smtp&x=<b>")
    link = '<a href="/admin/mail?tab=smtp&amp;x=&lt;b&gt;">{}</a>'
    assert link.format("Where the wiki configures mail") in text(as_admin.get(PAGE))
    french = text(as_admin.get(PAGE, headers={"Accept-Language": "fr"}))
    assert link.format("Où le wiki configure l’envoi des e-mails") in french


@pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=False)
def test_without_the_setting_the_reason_links_nowhere(as_admin):
    assert "Where the wiki configures mail" not in text(as_admin.get(PAGE))
    assert as_admin.get(API).get_json()["status"]["mailSettingsUrl"] is None


@pytest.mark.app_config(MAIL_DEFAULT_SENDER=None)
class TestWithoutASender:
    def test_the_status_and_the_page_name_the_missing_sender_in_the_readers_language(
            self, as_admin):
        status = as_admin.get(API).get_json()["status"]
        assert (status["mailConfigured"], status["mailProblem"]) == (False, NO_SENDER)
        assert "set MAIL_DEFAULT_SENDER" in text(as_admin.get(PAGE))
        french = text(as_admin.get(PAGE, headers={"Accept-Language": "fr"}))
        assert "définissez MAIL_DEFAULT_SENDER" in french


# -- what needs an operator (docs/operating.md#the-status-command) ---------------------------


@pytest.mark.app_config(WIKINOTIFY_BACKLOG_WARNING=60)
def test_an_old_event_and_no_worker_are_warned_of_at_the_top_of_the_page(app, as_admin):
    with app.app_context():
        db.session.add(Event(kind="page:edit", origin="user",
                             created_at=utcnow() - timedelta(minutes=2)))
        db.session.commit()
    status = as_admin.get(API).get_json()["status"]
    command = "rq worker --url $REDIS " + " ".join(queue_names(app))
    [backlog] = [w for w in status["warnings"] if "oldest waiting event" in w]
    assert "No worker seems to be running" in backlog and command in backlog
    assert any("rq cron has not run" in warning for warning in status["warnings"])
    assert status["vitals"]["workers"] == 0
    html = text(as_admin.get(PAGE))
    warnings = html[html.index('class="wn-banner wn-warnings" role="alert"'):]
    assert warnings.index("No worker seems to be running") < warnings.index("Settings")
    assert f"{len(status['warnings'])} things need attention" in warnings


def test_a_wiki_that_keeps_up_shows_no_warning(app, as_admin):
    with registered_worker(app), registered_cron(app):
        status = as_admin.get(API).get_json()["status"]
        html = text(as_admin.get(PAGE))
    assert status["warnings"] == []
    assert "wn-warnings" not in html
    assert "1 worker serves wikinotify's queues" in html
    assert re.search(r"Last seen \d+ seconds? ago", html)


def test_a_count_at_the_cap_reads_as_at_least_that_many_everywhere_it_shows(
        app, busy_queue, as_admin, monkeypatch):
    """A capped count (vitals.COUNT_CAP) is said with a "+", in the chart's summary too,
    in the reader's number format."""
    monkeypatch.setattr(vitals, "COUNT_CAP", 1)
    html = re.sub(r"\s+", " ", text(as_admin.get(PAGE)))
    assert "Emails over the last 24 hours, by hour: 2 sent, 1+ failed." in html
    assert "<dt>Emails failed, last 24 hours</dt> <dd>1+</dd>" in html
    assert "1+ mail failed in the last 24 hours" in html  # the warning
    french = text(as_admin.get(PAGE, headers={"Accept-Language": "fr"}))
    assert "2 envoyés, 1+ en échec" in french


def test_a_capped_count_is_written_in_the_language_s_digits():
    assert vitals.COUNT_CAP == 10_000
    assert vitals.counted(10_000, "en") == "10,000+"
    assert vitals.counted(10_000, "fr") == "10\u202f000+"
    assert vitals.counted(9_999, "en") == "9,999"
    assert vitals.counted(10_000) == "10000+"  # the operator's CLI: plain digits
