"""One account may have at most ``WIKINOTIFY_ENDPOINTS_PER_ACCOUNT`` webhooks and chat
targets together (docs/channels.md#webhooks); the site's own count as one account's. One more
is a 409 ``too_many_endpoints`` on the API and on the pages, and saves nothing; another
account is not affected; two creations at once cannot both take the last place."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from demo.models import db
from tests.helpers.web import login
from tests.helpers.wiki import user
from wikinotify.models import Endpoint, utcnow
from wikinotify.outbound import endpoints

API = "/_notifications/api/webhooks"
CHAT = "/_notifications/api/chat"
CAP = 3


pytestmark = pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"],
                                    WIKINOTIFY_ENDPOINTS_PER_ACCOUNT=CAP)


def webhook(client, n: int, **extra):
    return client.post(API, json={"url": f"http://127.0.0.1:9/hook/{n}",
                                  "categories": ["watchedPage"], **extra})


def chat(client, topic: str):
    return client.post(CHAT, json={"url": f"ntfy://127.0.0.1:9/{topic}"})


def held(app, owner: str | None) -> int:
    with app.app_context():
        owner_id = str(user(owner).id) if owner else None
        where = Endpoint.owner_id.is_(None) if owner_id is None else Endpoint.owner_id == owner_id
        return db.session.scalar(sa.select(sa.func.count()).where(where))


def assert_refused_for_the_cap(response) -> None:
    assert response.status_code == 409, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == "too_many_endpoints"
    assert f"There are {CAP} webhooks and chat targets here already" in error["message"]


def test_webhooks_and_chat_targets_count_together_up_to_the_cap(app, client):
    login(client, "alice")
    assert webhook(client, 1).status_code == 201
    assert chat(client, "first").status_code == 201
    assert webhook(client, 2).status_code == 201
    assert_refused_for_the_cap(webhook(client, 3))
    assert_refused_for_the_cap(chat(client, "second"))
    assert held(app, "alice") == CAP
    # Another account has her own room.
    login(client, "bob")
    assert webhook(client, 1).status_code == 201
    # A disabled endpoint still counts (it can be enabled again); a deleted one does not.
    login(client, "alice")
    first = client.get(API).get_json()["items"][0]["id"]
    assert client.patch(f"{API}/{first}", json={"enabled": False}).status_code == 200
    assert_refused_for_the_cap(webhook(client, 3))
    assert client.delete(f"{API}/{first}", json={}).status_code == 204
    assert webhook(client, 3).status_code == 201


def test_the_sites_own_endpoints_have_a_cap_of_their_own(app, client):
    login(client, "admin")
    for n in range(CAP):
        assert webhook(client, n, scope="site", categories=["pageCreated"]).status_code == 201
    assert_refused_for_the_cap(webhook(client, CAP, scope="site", categories=["pageCreated"]))
    assert held(app, None) == CAP
    assert webhook(client, 0).status_code == 201  # the administrator's own account's


def test_the_forms_refuse_one_more_and_save_nothing(app, client):
    login(client, "alice")
    with app.app_context():
        for n in range(CAP):
            db.session.add(Endpoint(kind="webhook", owner_id=str(user("alice").id),
                                    url=f"http://127.0.0.1:9/{n}", categories=["mention"],
                                    state="active", verified_at=utcnow()))
        db.session.commit()
    for path, data in [
        ("/_notifications/webhooks", {"url": "http://127.0.0.1:9/more",
                                      "categories": ["mention"]}),
        ("/_notifications/chat", {"url": "ntfy://127.0.0.1:9/more"}),
    ]:
        response = client.post(path, data=data)
        assert response.status_code == 409
        assert f"There are {CAP} webhooks and chat targets here already" in \
            response.get_data(as_text=True)
    assert held(app, "alice") == CAP


def test_two_creations_at_once_cannot_both_take_the_last_place(app):
    """The first holds the owner's lock (on SQLite, the database's write lock) until it
    commits; the second, waiting, then counts what the first made."""
    with app.app_context():
        alice = str(user("alice").id)
        for n in range(CAP - 1):
            db.session.add(Endpoint(kind="webhook", owner_id=alice, url=f"http://127.0.0.1:9/{n}",
                                    categories=["mention"], state="active"))
        db.session.commit()
        first = Session(db.engine)
        endpoints.create_webhook(first, alice, url="http://127.0.0.1:9/a", categories=["mention"])
        outcome: list[str] = []

        def second() -> None:
            with app.app_context(), Session(db.engine) as other:
                try:
                    endpoints.create_webhook(other, alice, url="http://127.0.0.1:9/b",
                                             categories=["mention"])
                    other.commit()
                    outcome.append("made")
                except endpoints.TooMany:
                    outcome.append("refused")

        racer = threading.Thread(target=second)
        racer.start()
        racer.join(1)  # it waits on the lock first held, or (unlocked) has made its own
        first.commit()
        first.close()
        racer.join(30)
        assert outcome == ["refused"]
    assert held(app, "alice") == CAP
