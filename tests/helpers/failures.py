"""Items given up on, for the tests of their retries: a failed mail of two rows and a
failed webhook or chat delivery, written as the drain and the delivery run leave them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from demo.models import db
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import edit, entries_for, set_delay, user, watch
from wikinotify.models import Delivery, Endpoint, Notification, utcnow
from wikinotify.outbound import secrets_box, standard_webhooks


def failed_mail(app) -> list[int]:
    """Alice's mail of two entries, given up on (three transient failures), and the
    sent mail of another entry of hers: the ids of the failed mail's rows."""
    set_delay(3600)  # the fan-out writes the rows; no mail goes until the test says
    watch("ops/runbook", "alice")
    edit("handbook/onboarding", "bob", "First")
    edit("ops/runbook", "bob", "Second")
    run_jobs(app)
    rows = entries_for("alice", email_state="pending")
    assert len(rows) == 2
    gave_up = datetime.now(UTC) - timedelta(minutes=3)
    db.session.execute(sa.update(Notification).where(Notification.email_state == "pending")
                       .values(email_state="failed", emailed_at=gave_up, email_attempts=3,
                               email_error="451 try again later",
                               email_error_class="transient"))
    db.session.commit()
    return sorted(row.id for row in rows)


def failed_delivery(url: str, owner: str | None = "alice", kind: str = "webhook") -> int:
    """A test delivery to ``owner``'s endpoint at ``url`` (the site's when None), given up
    after its eight attempts."""
    endpoint = Endpoint(
        kind=kind, owner_id=str(user(owner).id) if owner else None, url=url,
        categories=["watchedPage"], state="active", verified_at=utcnow(),
        secret_encrypted=secrets_box.seal(standard_webhooks.new_secret()),
    )
    db.session.add(endpoint)
    db.session.flush()
    delivery = Delivery(endpoint_id=endpoint.id, message_id=standard_webhooks.new_message_id(),
                        type="webhook.test", payload={"message": "hello"}, state="failed",
                        attempts=8, response_code=500, latency_ms=12,
                        error_class="transient", error="the receiver answered 500")
    db.session.add(delivery)
    db.session.commit()
    return delivery.id
