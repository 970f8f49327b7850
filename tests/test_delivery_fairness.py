"""One account's slow or hanging receivers delay its own deliveries, not other people's
(docs/channels.md#webhooks): a run takes turns across owners, an endpoint that fails is tried no
more in that run, and one owner's requests may take only ``WIKINOTIFY_DELIVERY_SHARE``
seconds of it. Real receivers on 127.0.0.1, one run of the engine; SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from demo.models import db
from tests.helpers.app import on_sqlite
from tests.helpers.wiki import user
from wikinotify.models import Delivery, Endpoint, utcnow
from wikinotify.outbound import engine, secrets_box, standard_webhooks
from wikinotify.state import state

#: Seconds a test receiver has to answer in all; a hanging one sleeps well past it.
TIMEOUT = 1
HANG = 4
#: Seconds of a run one owner's requests may take in these tests: two hung requests.
SHARE = 2


pytestmark = pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"],
                                    WIKINOTIFY_OUTBOUND_TIMEOUT=TIMEOUT,
                                    WIKINOTIFY_DELIVERY_SHARE=SHARE)


def endpoint_of(owner: str | None, url: str) -> int:
    """An active webhook of ``owner`` (the site's for ``None``), as a row: the API's
    own checks are another test's."""
    row = Endpoint(
        kind="webhook", owner_id=str(user(owner).id) if owner else None, url=url,
        categories=["watchedPage"],
        secret_encrypted=secrets_box.seal(standard_webhooks.new_secret()),
        state="active", verified_at=utcnow(),
    )
    db.session.add(row)
    db.session.commit()
    return row.id


def due(endpoint_id: int, *, minutes_ago: float) -> int:
    """A ``webhook.test`` delivery to ``endpoint_id``, due since ``minutes_ago``."""
    row = Delivery(endpoint_id=endpoint_id, message_id=standard_webhooks.new_message_id(),
                   type="webhook.test", payload={"message": "hello"}, state="pending",
                   next_attempt_at=utcnow() - timedelta(minutes=minutes_ago))
    db.session.add(row)
    db.session.commit()
    return row.id


def one_run(app) -> engine.RunReport:
    st = state(app)
    return engine.run(app, db.session(), st.host, st.registry)


def rows(ids: list[int]) -> list[Delivery]:
    db.session.expire_all()
    return [db.session.get_one(Delivery, i) for i in ids]


def test_an_accounts_hanging_receivers_do_not_hold_up_anothers_delivery(app, receiver):
    """The finding: bob's receivers hang for the whole timeout, his deliveries are the
    oldest; alice's arrives in the same run, second, and bob's take no more of the run
    than his share (plus the request that crossed it)."""
    with app.app_context():
        bobs = []
        for n in range(5):
            receiver.answer(f"/bob/{n}", delay=HANG)
            bobs.append(due(endpoint_of("bob", receiver.url(f"/bob/{n}")), minutes_ago=10 - n))
        alices = due(endpoint_of("alice", receiver.url("/alice")), minutes_ago=1)
        one_run(app)
        assert rows([alices])[0].state == "delivered"
        order = [r.path for r in receiver.requests]
        assert order.index("/alice") == 1, order  # after bob's oldest, not after all five
        tried = [r for r in rows(bobs) if r.attempts]
        assert len(tried) == SHARE // TIMEOUT, order
        assert all(r.state == "pending" for r in rows(bobs))  # the rest wait their turn


def test_a_run_takes_turns_across_owners_oldest_first(app, receiver):
    with app.app_context():
        bob = endpoint_of("bob", receiver.url("/bob"))
        for minutes in (30, 20, 10):
            due(bob, minutes_ago=minutes)
        due(endpoint_of("alice", receiver.url("/alice")), minutes_ago=5)
        due(endpoint_of("carol", receiver.url("/carol")), minutes_ago=1)
        site = endpoint_of(None, receiver.url("/site"))  # the site's own count as one owner
        due(site, minutes_ago=25)
        due(site, minutes_ago=15)
        report = one_run(app)
        assert report.delivered == 7
    assert [r.path for r in receiver.requests] == [
        "/bob", "/site", "/alice", "/carol",  # each owner's oldest, oldest first
        "/bob", "/site",
        "/bob",
    ]


def test_an_endpoint_that_fails_is_tried_no_more_in_that_run(app, receiver):
    receiver.answer("/down", 503)
    with app.app_context():
        down = endpoint_of("bob", receiver.url("/down"))
        waiting = [due(down, minutes_ago=m) for m in (30, 20, 10)]
        up = due(endpoint_of("bob", receiver.url("/up")), minutes_ago=1)
        report = one_run(app)
        first, *rest = rows(waiting)
        assert (first.state, first.attempts, first.error_class) == ("pending", 1, "transient")
        assert [(r.state, r.attempts) for r in rest] == [("pending", 0)] * 2
        assert rows([up])[0].state == "delivered" and report.delivered == 1
        assert engine.waiting(db.session())  # the next run takes them up
    assert [r.path for r in receiver.requests] == ["/down", "/up"]


def test_a_claim_takes_one_delivery_whatever_waits(app, receiver):
    """The claim's subquery is evaluated once (DESIGN's claim-query trap), with the join
    to the endpoints and the turn's exclusions added: with an owner and an endpoint left
    out, it takes one delivery of someone else's and leaves theirs as they were, though
    they are the oldest."""
    with app.app_context():
        waiting = {}
        for owner, oldest in (("alice", 30), ("bob", 20), ("carol", 3)):
            endpoint_id = endpoint_of(owner, receiver.url(f"/{owner}"))
            waiting[owner] = (endpoint_id, [due(endpoint_id, minutes_ago=oldest - m)
                                            for m in range(3)])
        bobs_endpoint, bobs = waiting["bob"]
        taken = engine.claim(db.session(), timedelta(minutes=5),
                             owners_out={str(user("alice").id)}, endpoints_out={bobs_endpoint})
        assert taken is not None and taken[0] in waiting["carol"][1]
        left_out = rows(waiting["alice"][1] + bobs)
        assert [(r.state, r.attempts) for r in left_out] == [("pending", 0)] * 6
        assert engine.claim(db.session(), timedelta(minutes=5)) is not None
        sending = db.session.scalars(sa.select(Delivery.id).where(Delivery.state == "sending"))
        assert sorted(sending) == sorted([taken[0], waiting["alice"][1][0]])


@on_sqlite  # PostgreSQL's foreign key deletes an endpoint's deliveries with it
def test_a_delivery_whose_endpoint_is_gone_is_no_work_for_the_next_run(app):
    """SQLite keeps no foreign key here: an endpoint deleted under a pending delivery
    leaves it behind. The claim never takes it (it finds deliveries through their
    endpoints), and the probe that asks for another run does not count it either; it
    did, and the delivery run asked for itself again, forever."""
    with app.app_context():
        gone = endpoint_of("bob", "http://127.0.0.1:9/gone")
        due(gone, minutes_ago=1)
        db.session.execute(sa.delete(Endpoint).where(Endpoint.id == gone))
        db.session.commit()
        assert not engine.waiting(db.session())
        assert one_run(app).delivered == 0
        assert not engine.waiting(db.session())
