"""``GET /api/openapi.json``: a valid OpenAPI 3.1 document that describes every API route,
and the live API holding to it under schemathesis, as an ordinary user and as an
administrator."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login_with_csrf
from tests.helpers.wiki import edit, watch
from wikinotify.openapi import api_endpoints, described, described_views

DOC = "/_notifications/api/openapi.json"

#: Per operation and generation mode: enough to reach every status an operation has,
#: bounded so that the whole run (two roles, every operation) takes well under a minute.
MAX_EXAMPLES = 20

#: Repeatable (derandomize), no shrinking (a failure is reported as found), and no
#: deadline: the first request of an operation pays for its app's warm-up.
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

#: Where a body or value valid by the document is still refused with a 400, because no
#: JSON Schema can say which ones are right: an opaque keyset cursor, a signed
#: unsubscribe or mute token, the admin settings' and the email schedule's integers, which must be
#: written without a fraction (JSON Schema counts ``100.0`` as an integer; the API refuses
#: it, on purpose), and the schedule's time zone, an IANA name the document cannot list.
#: A webhook's or chat target's URL must resolve to a public address (the SSRF guard, after
#: DNS) and its categories be ones the caller may see; a deliveries cursor is opaque too.
#: An undo token is signed too, and a subscribe-again token is an unsubscribe token. A
#: push subscription's endpoint must be on a known push service and its keys a browser's
#: (a P-256 point, a 16-byte secret), which base64url alone does not say. An
#: announcement's audience is one of two shapes and names the wiki's own groups and sites.
#: ``positive_data_acceptance`` accepts a 400 there, and only there.
VALID_BUT_REFUSED = ("api_list", "unsubscribe", "mute_from_mail", "put_admin_settings",
                     "put_preferences",
                     "create_webhook_api", "update_webhook", "create_chat_api",
                     "webhook_deliveries", "api_undo", "resubscribe", "subscribe_push",
                     "create_announcement_api")


pytestmark = [
    # CSRF on, as a deployment runs it: the fuzzed writes carry a real token. The rate
    # limits far above what the fuzzing sends: a 429 would hide what a case finds
    # (tests/test_rate_limits.py holds the 429 to its documented shape).
    pytest.mark.app_config(WIKINOTIFY_MAIL_ENABLED=True, WTF_CSRF_ENABLED=True,
                           WIKINOTIFY_WRITE_RATE_LIMIT="100000/minute",
                           WIKINOTIFY_SEND_RATE_LIMIT="100000/minute"),
]


def fetch_doc(client) -> dict:
    response = client.get(DOC)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_the_document_is_valid_openapi_3_1(app, client):
    login_with_csrf(client, "alice")
    doc = fetch_doc(client)
    validate(doc)
    assert doc["openapi"] == "3.1.0"
    error = doc["components"]["schemas"]["ErrorDetail"]
    assert set(error["properties"]) == {"code", "message", "fields"}
    listing = doc["paths"]["/_notifications/api/notifications"]["get"]
    assert listing["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"}


def test_a_guest_gets_401_json(client):
    response = client.get(DOC)
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "unauthorized"


def test_every_api_route_is_described_with_each_of_its_methods(app, client):
    assert api_endpoints(app) <= set(described(app)), "an /api/ route carries no @operation"
    login_with_csrf(client, "alice")
    paths = fetch_doc(client)["paths"]
    for rule in app.url_map.iter_rules():
        if rule.endpoint not in api_endpoints(app):
            continue
        path = rule.rule.replace("<", "{").replace(">", "}")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in paths.get(path, {}), f"{method} {rule.rule} undocumented"


def test_no_operation_describes_a_view_flask_does_not_route_to(app):
    """An ``@operation`` under a wrapper (``@api_login_required``...) would mark a
    function Flask never calls, and its route would go undescribed."""
    assert set(described_views()) <= set(app.view_functions.values())


def test_the_document_follows_the_wiki_it_describes(app, client):
    """The admin body names this wiki's sites, the preferences body its categories."""
    from wikinotify.state import state

    login_with_csrf(client, "admin")
    schemas = fetch_doc(client)["components"]["schemas"]
    with app.app_context():
        site_ids = sorted(site.id for site in state().host.sites())
        keys = set(state().registry)
    sites = schemas["AdminSettingsUpdate"]["properties"]["sites"]
    assert sites["items"]["properties"]["id"]["enum"] == site_ids
    assert set(schemas["CategoriesUpdate"]["required"]) == keys


# -- schemathesis against the live app ------------------------------------------------------


@pytest.fixture
def inbox_entries(app):
    """Entries for alice and the administrator to list, read and dismiss: Bob edits a
    page both watch, and a real worker fans the edits out."""
    with app.app_context():
        watch("handbook/onboarding", "alice")
        watch("handbook/onboarding", "admin")
        edit("handbook/onboarding", "bob", "First edit")
        edit("handbook/welcome", "bob", "Another page")
    run_jobs(app)


def signed_in_schema(app, username: str):
    """The document as ``username`` reads it, loaded for schemathesis with that session
    as the document's ``session`` scheme; every case is sent to ``app`` in-process.

    Loaded from the dict rather than ``from_wsgi``: the document needs a session, and
    werkzeug's client replaces a ``Cookie`` header with its own (empty) jar."""
    client = app.test_client()
    login_with_csrf(client, username)
    token = csrf_token(client.get("/_notifications/inbox").get_data(as_text=True))
    cookie = client.get_cookie(app.config["SESSION_COOKIE_NAME"]).value
    schema = schemathesis.openapi.from_dict(fetch_doc(client),
                                            config=fuzzing_config(cookie, token))
    schema.app = app
    return schema


def fuzzing_config(cookie: str, token: str) -> schemathesis.Config:
    """The signed-in session and its CSRF token as the document's ``session`` and
    ``csrf`` schemes, and the exceptions to ``positive_data_acceptance`` (see
    ``VALID_BUT_REFUSED``)."""
    accepted = ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]
    return schemathesis.Config.from_dict({
        "auth": {"openapi": {"session": {"api_key": cookie}, "csrf": {"api_key": token}}},
        "operations": [
            {"include-operation-id": operation_id,
             "checks": {"positive_data_acceptance": {"expected-statuses": accepted}}}
            for operation_id in VALID_BUT_REFUSED
        ],
    })


def fuzz(operation, mode: GenerationMode, username: str, failures: dict[str, str]) -> int:
    """Run one operation's cases in one mode. Failures are kept, not raised, so one run
    lists them all: the first example of each (operation, mode, user, kind of failure).
    Returns how many cases ran."""
    ran = 0

    def keep(kind: str, report: str) -> None:
        failures.setdefault(f"{operation.label} [{mode.value}, {username}] {kind}", report)

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        nonlocal ran
        ran += 1
        try:
            case.call_and_validate()
        except FailureGroup as group:
            keep(", ".join(sorted(f.title for f in group.exceptions)), str(group))
        except Exception as error:  # the app raised: TESTING propagates what would be a 500
            keep(type(error).__name__, f"{error!r}\n{case.as_curl_command()}")

    run()
    return ran


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda mode: mode.value)
@pytest.mark.parametrize("username", ["alice", "admin"])
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_schemathesis_finds_nothing_as_a_user_and_as_an_administrator(
    app, inbox_entries, username, mode
):
    """PostgreSQL only: the fuzzing is the slowest test here, and the database the
    contract is held to. Every operation, in each generation mode, for each role: four
    tests, which xdist's workers run side by side (one test of all four took 90 s)."""
    started, ran, failures = time.monotonic(), 0, {}
    for result in signed_in_schema(app, username).get_all_operations():
        ran += fuzz(result.ok(), mode, username, failures)
    print(f"schemathesis: {ran} cases in {time.monotonic() - started:.1f}s, "
          f"{len(failures)} distinct failures")
    assert ran, "no operation was fuzzed"
    assert not failures, "\n\n".join(f"== {key}\n{report}" for key, report in failures.items())
