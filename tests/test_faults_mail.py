"""The fault suite's mail scenarios (docs/operating.md#failures-and-dead-letters): real ``rq
worker`` processes killed or cut off from PostgreSQL in the middle of a mail run, and relays that
refuse, hang, throttle, reject one address or refuse the login. Each asserts the end state: every
due mail sent exactly once (apart from the documented at-least-once window), nothing left
``sending``. PostgreSQL only: it is what production runs, and what several workers share."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections import Counter

import pytest
import sqlalchemy as sa

from tests.helpers.app import ROOT
from tests.helpers.database import (
    connections_named,
    empty_everything,
    named_database_url,
    terminate_connections,
)
from tests.helpers.jobs import run_jobs, wait_for, worker_command, worker_env
from tests.helpers.smtp import SmtpServer
from tests.helpers.wiki import (
    all_entries,
    edit,
    entries_for,
    mail_due_for_readers,
    set_mail_batch,
    watch,
)
from wikinotify import counters, queue
from wikinotify.jobs.send_mail import send_mail

#: A claim lasts this long in these tests (production: 15 minutes), so that another
#: worker may take over a dead one's claim within the test.
LEASE = 3


@pytest.fixture
def database_url(postgres_url):
    empty_everything(postgres_url)
    return postgres_url


pytestmark = [pytest.mark.app_config(smtp=True, WIKINOTIFY_MAIL_LEASE=LEASE),
              pytest.mark.mail_delay(0)]


@pytest.fixture
def ctx(ctx):
    """The suite's, with mail runs of up to 1,000 recipients."""
    set_mail_batch(1000)
    return ctx


def start_worker(app, env: dict | None = None) -> subprocess.Popen:
    """A real ``rq worker --burst`` (SimpleWorker: the job runs in this very process, so
    killing it kills the run) on both queues."""
    return subprocess.Popen(worker_command(app), cwd=ROOT, env=env or worker_env(app),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def assert_each_sent_once(smtp, addresses: list[str], *, in_flight: int = 0) -> None:
    received = Counter(smtp.inbox.recipients)
    assert set(received) == set(addresses)
    assert sum(received.values()) - len(addresses) <= in_flight
    states = Counter(e.email_state for e in all_entries())
    assert states == {"sent": len(addresses)}  # nothing left 'sending' or pending


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_finished_by_another_after_the_lease(ctx, smtp):
    smtp.inbox.delay = 0.02
    addresses = mail_due_for_readers(200)
    queue.enqueue(ctx, "send_mail")
    victim = start_worker(ctx)
    wait_for(lambda: len(smtp.inbox.raw) >= 60, seconds=60)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    received_by_the_victim = len(smtp.inbox.raw)
    assert received_by_the_victim < 200
    left = Counter(e.email_state for e in all_entries())
    # The mail in flight, and the next one, claimed and built while the relay took it;
    # the others were never claimed.
    assert left["sending"] <= 2

    time.sleep(LEASE + 0.5)
    # The killed run never released its hold, so the cron would wait for it to lapse
    # (the job timeout and a minute); here the next run is enqueued at once.
    queue.enqueue(ctx, "send_mail")
    heir = start_worker(ctx)
    assert heir.wait(timeout=120) == 0
    # At most the one mail in flight at the kill went twice (at-least-once).
    assert_each_sent_once(smtp, addresses, in_flight=1)


@pytest.mark.slow
def test_database_connections_cut_mid_run_lose_and_repeat_nothing(ctx, smtp, postgres_url):
    smtp.inbox.delay = 0.05
    addresses = mail_due_for_readers(60)
    name = f"wn-worker-{uuid.uuid4().hex[:8]}"
    env = worker_env(ctx)
    env["FLASK_SQLALCHEMY_DATABASE_URI"] = named_database_url(postgres_url, name)
    queue.enqueue(ctx, "send_mail")
    worker = start_worker(ctx, env)
    wait_for(lambda: len(smtp.inbox.raw) >= 5, seconds=60)
    kills = terminate_while(lambda: worker.poll() is None, name, every=0.4)
    assert worker.wait(timeout=120) == 0
    assert kills >= 1  # connections were cut in the middle of the run

    time.sleep(LEASE + 0.5)  # a claim the failed run left is taken again after the lease
    queue.enqueue(ctx, "kick_mail")  # what the next minute's cron does
    assert start_worker(ctx, env).wait(timeout=120) == 0
    assert_each_sent_once(smtp, addresses)


class TestARunThatFailsAfterSending:
    """The database lost in the middle of a mail run (its connections cut while the relay
    has the first mail): the run fails, and what it sent is counted and logged still."""

    NAME = f"wn-run-{uuid.uuid4().hex[:8]}"


    @pytest.fixture
    def database_url(self, postgres_url):
        empty_everything(postgres_url)
        return named_database_url(postgres_url, self.NAME)


    def test_the_mails_it_sent_are_counted_and_logged(self, ctx, smtp, caplog):
        mail_due_for_readers(5)

        def cut(message: bytes) -> None:
            if len(smtp.inbox.raw) == 1:
                terminate_connections(self.NAME)
                wait_for(lambda: not connections_named(self.NAME), seconds=10)

        smtp.inbox.on_message = cut
        with pytest.raises(sa.exc.DBAPIError):
            send_mail()
        assert len(smtp.inbox.raw) == 1
        assert counters.read(ctx).get(counters.MAILS_SENT.field()) == 1
        [line] = [r for r in caplog.records if r.getMessage().startswith(
            "wikinotify: send_mail ended early")]
        assert line.levelname == "WARNING" and "mails=1" in line.getMessage()


def terminate_while(running, application_name: str, *, every: float) -> int:
    """Cut the connections named ``application_name`` (the worker's, and no other
    test's) every ``every`` seconds while ``running()``; how many were cut."""
    killed = 0
    while running():
        killed += terminate_connections(application_name)
        time.sleep(every)
    return killed


# -- relays in trouble, each with its class -------------------------------------------------

#: Each relay in trouble → the classes its failures leave on the rows.
RELAY_FAULTS = {
    "refusing": {"transient"},
    "hanging": {"transient"},
    "slow_down": {"rate_limit"},
    "rejecting_carol": {"permanent"},
    "refusing_login": {"configuration"},
}


def relay_settings(relay_fault, request) -> dict:
    """The relay a fault needs: the hanging one's port, or a login it refuses."""
    if relay_fault == "hanging":
        return {"MAIL_PORT": request.getfixturevalue("hanging_relay").port}
    if relay_fault == "refusing_login":
        return {"MAIL_USERNAME": "wiki", "MAIL_PASSWORD": "wrong"}
    return {}


@pytest.mark.app_config(relay_settings, smtp=True, WIKINOTIFY_MAIL_LEASE=LEASE,
                        WIKINOTIFY_SMTP_TIMEOUT=1)
class TestRelayInTrouble:
    """Refusing, hanging, "slow down", a 5xx for one address, a refused login."""


    @pytest.fixture
    def relay_fault(self, request):
        return request.param


    @pytest.fixture
    def smtp(self, relay_fault):
        server = SmtpServer(login=("wiki", "right") if relay_fault == "refusing_login" else None)
        server.start()
        yield server
        server.stop()


    @pytest.mark.parametrize("relay_fault", list(RELAY_FAULTS), indirect=True)
    def test_each_mail_is_left_with_its_class(self, ctx, smtp, relay_fault):
        if relay_fault == "refusing":
            smtp.stop()
        smtp.inbox.reply = "451 4.7.1 Slow down" if relay_fault == "slow_down" else None
        if relay_fault == "rejecting_carol":
            smtp.inbox.refuse = {"carol@example.com": "550 5.1.1 No such user"}
        watch("handbook/onboarding", "carol")
        edit("handbook/onboarding", "bob", "Edit")
        started = time.monotonic()
        # The relay is what fails here, not the worker process (the scenarios above kill
        # real ones): a real RQ worker in this process runs the jobs.
        run_jobs(ctx)
        assert time.monotonic() - started < 30
        classes = {e.email_error_class for name in ("alice", "carol") for e in entries_for(name)}
        assert classes - {None} == RELAY_FAULTS[relay_fault]
        states = Counter(e.email_state for e in all_entries())
        assert "sending" not in states
        if relay_fault == "rejecting_carol":
            assert states == {"sent": 1, "failed": 1} and smtp.inbox.recipients == [
                "alice@example.com"]
        else:
            assert states == {"pending": 2}  # to be tried again; the run stopped at the first
