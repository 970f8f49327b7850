"""What the mail run does when a mail cannot be built or the relay misbehaves
(docs/operating.md#failures-and-dead-letters): every failure is recorded on its mail's rows with its
class, and only the relay's own trouble stops a run. Real Redis, real SMTP servers on 127.0.0.1
(aiosmtpd, and a socket that never answers), real RQ workers; SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.host import DemoHost
from demo.models import db
from tests.helpers.app import ROOT
from tests.helpers.jobs import (
    InProcessWorker,
    run_jobs,
    run_results,
    wait_for,
    worker_command,
    worker_env,
)
from tests.helpers.smtp import SmtpServer
from tests.helpers.web import login
from tests.helpers.wiki import (
    all_entries,
    edit,
    entries_for,
    mail_due_for_readers,
    main_site,
    page,
    prefer,
    set_delay,
    set_mail_batch,
    user,
    watch,
)
from wikinotify import inbox, queue
from wikinotify.mail import compose, relay
from wikinotify.models import Notification

pytestmark = [pytest.mark.app_config(smtp=True), pytest.mark.mail_delay(0)]


@pytest.fixture
def ctx(ctx):
    """The suite's, with carol watching the page alice watches already."""
    watch("handbook/onboarding", "carol")
    return ctx


def make_due() -> None:
    db.session.execute(sa.update(Notification).where(Notification.email_state == "pending")
                       .values(email_after=datetime.now(UTC) - timedelta(seconds=1)))
    db.session.commit()


def mail_run(app) -> None:
    queue.enqueue(app, "send_mail")
    run_jobs(app)


def state_of(name: str) -> tuple:
    [entry] = entries_for(name)
    return entry.email_state, entry.email_attempts, entry.email_error_class


def states_of(*names: str) -> list[tuple]:
    """Their states, in an order that does not depend on which the run took first."""
    return sorted((state_of(name) for name in names), key=str)


# -- item 2: a title with CR/LF -------------------------------------------------------------


def test_a_title_with_cr_lf_is_mailed_on_one_line_and_the_others_get_theirs(ctx, smtp):
    wiki.save_page(main_site(), user("bob"), "handbook/onboarding",
                   "Onboarding\r\nBcc: mallory@example.com\x07", "v2")
    run_jobs(ctx)
    assert sorted(smtp.inbox.recipients) == ["alice@example.com", "carol@example.com"]
    alice = next(m for m in smtp.inbox.messages if m["To"] == "alice@example.com")
    assert alice["Subject"] == (
        "[Main wiki] Onboarding Bcc: mallory@example.com: 1 edit by Bob Builder")
    assert alice["Bcc"] is None
    assert {e.email_state for e in all_entries()} == {"sent"}


def test_an_error_sending_one_mail_is_recorded_on_its_rows_and_the_run_goes_on(ctx, smtp):
    # An address Flask-Mail cannot encode on the way out (an IDNA label over 63
    # characters): it fails at send time, not when the message is built.
    user("alice").email = "alice@" + "ä" * 64 + ".example"
    db.session.commit()
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    assert smtp.inbox.recipients == ["carol@example.com"]
    [entry] = entries_for("alice")
    assert (entry.email_state, entry.email_error_class) == ("failed", "permanent")
    assert "label" in entry.email_error
    assert state_of("carol")[0] == "sent"


# -- item 3: a timeout, and a queue of its own ----------------------------------------------


@pytest.mark.app_config(lambda hanging_relay: {"MAIL_PORT": hanging_relay.port},
                        MAIL_SERVER="127.0.0.1", MAIL_DEFAULT_SENDER="wiki@localhost",
                        MAIL_SUPPRESS_SEND=False, WIKINOTIFY_SMTP_TIMEOUT=1)
class TestHangingRelay:
    def test_the_run_ends_at_the_timeout_and_fan_out_goes_first(self, ctx, hanging_relay):
        edit("handbook/onboarding", "bob", "Edit")
        started = time.monotonic()
        run_jobs(ctx)  # the fan-out, then a mail run that meets the hung relay
        assert time.monotonic() - started < 6
        assert hanging_relay.accepted  # it did connect, and got no answer
        # The first mail timed out (transient: one attempt burnt); the run stopped there.
        first, second = states_of("alice", "carol")
        assert first == ("pending", 0, None) and second == ("pending", 1, "transient")
        timed_out = next(e for e in all_entries() if e.email_attempts)
        assert "timed out" in timed_out.email_error
        assert timed_out.email_after > datetime.now(UTC) + timedelta(seconds=30)

        mail_queue = queue.queue(ctx, job="send_mail")
        queue.enqueue(ctx, "send_mail")
        [mail_job_id] = mail_queue.job_ids
        edit("home", "bob", "Another edit")  # its dispatch is queued after the mail run
        [dispatch_id] = queue.queue(ctx).job_ids
        run_jobs(ctx)
        mail_job = mail_queue.fetch_job(mail_job_id)
        dispatch = queue.queue(ctx).fetch_job(dispatch_id)
        assert dispatch.enqueued_at > mail_job.enqueued_at
        assert dispatch.ended_at <= mail_job.started_at  # not held up behind it


def test_the_cron_asks_for_no_mail_run_while_one_is_queued_or_running(ctx):
    from tests.helpers.jobs import enqueue_cron_jobs

    mail_queue = queue.queue(ctx, job="send_mail")
    for _ in range(3):  # three minutes of cron, no worker: one mail run waits
        enqueue_cron_jobs(ctx)
        run_main_queue(ctx)
    assert mail_queue.count == 1
    # Running: the run holds it until it ends (here, as a run that is in progress would).
    queue.hold_mail_run(ctx)
    mail_queue.empty()
    enqueue_cron_jobs(ctx)
    run_main_queue(ctx)
    assert mail_queue.count == 0
    queue.release_kick(ctx, "send_mail")  # it ended
    enqueue_cron_jobs(ctx)
    run_main_queue(ctx)
    assert mail_queue.count == 1


def run_main_queue(app) -> None:
    """Only the fan-out queue (the cron's jobs), leaving the mail queue as it is."""
    q = queue.queue(app)
    with app.app_context():
        InProcessWorker([q], connection=q.connection).work(burst=True)


# -- item 4: the failure classes ------------------------------------------------------------


def test_a_refused_connection_is_transient(ctx, smtp):
    smtp.stop()
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    states = states_of("alice", "carol")
    assert states == [("pending", 0, None), ("pending", 1, "transient")]


def test_a_5xx_for_one_address_fails_it_at_once_and_the_others_go(ctx, smtp):
    smtp.inbox.refuse = {"carol@example.com": "550 5.1.1 No such user here"}
    edit("handbook/onboarding", "bob", "Edit")
    run_jobs(ctx)
    assert smtp.inbox.recipients == ["alice@example.com"]
    assert state_of("carol") == ("failed", 0, "permanent")
    [entry] = entries_for("carol")
    assert entry.email_error == "550 5.1.1 No such user here (carol@example.com)"
    client = ctx.test_client()
    login(client, "admin")
    [failure] = client.get("/_notifications/api/admin/settings").get_json()[
        "status"]["failures"]
    assert (failure["errorClass"], failure["error"]) == ("permanent", entry.email_error)
    page = client.get("/_notifications/admin").get_data(as_text=True)
    assert '<td class="wn-class">Refused for good</td>' in page


def test_a_slow_down_postpones_without_an_attempt_and_halves_the_next_batch(ctx, smtp):
    set_mail_batch(4)
    smtp.inbox.reply = "451 4.7.1 Slow down, too many messages"
    mail_due_for_readers(5)
    mail_run(ctx)
    rows = all_entries()
    throttled = [r for r in rows if r.email_error_class]
    assert [(r.email_state, r.email_attempts, r.email_error_class) for r in throttled] == [
        ("pending", 0, "rate_limit")]  # the run stopped at the first "slow down"
    assert throttled[0].email_error == "451 4.7.1 Slow down, too many messages"
    assert throttled[0].email_after > datetime.now(UTC) + timedelta(seconds=30)
    assert relay.batch(ctx, 4) == 2

    smtp.inbox.reply = None
    make_due()
    queue.enqueue(ctx, "send_mail")
    run_jobs(ctx)
    assert [r["mails"] for r in run_results(ctx, "send_mail")] == [0, 2, 3]
    assert relay.batch(ctx, 4) == 4  # a clean run restores the setting
    assert {r.email_state for r in all_entries()} == {"sent"}


def test_the_mail_built_behind_a_refused_one_is_given_back_as_it_was(ctx, smtp):
    """A run builds the next mail while the relay takes one; when the relay's answer
    stops the run, that mail's rows go back as if never claimed: pending and due, with
    no attempt burnt and no error, not left to their lease."""
    smtp.inbox.reply = "451 4.7.1 Slow down"
    mail_due_for_readers(3)
    mail_run(ctx)
    rows = all_entries()
    assert [r.email_error_class for r in rows].count("rate_limit") == 1
    others = [r for r in rows if r.email_error_class is None]
    assert [(r.email_state, r.email_attempts, r.email_error) for r in others] == [
        ("pending", 0, None)] * 2
    assert all(r.email_after <= datetime.now(UTC) for r in others)


def test_an_entry_read_while_its_mail_is_built_is_not_mailed_later(ctx, smtp, monkeypatch):
    """Reading cancels the mail, also one a run has claimed: read while the run builds
    its mail (the relay takes the one before), it stays cancelled when the relay's
    answer stops the run and the claim is given back, and no later run mails it."""
    smtp.inbox.reply = "451 4.7.1 Slow down"
    mail_due_for_readers(3)
    built: list[int] = []
    build = compose.build

    def build_and_be_read(**parts):
        built.append(parts["entries"][0].entry.id)
        if len(built) == 2:  # its reader reads it now, in a request of the wiki's
            with db.engine.begin() as connection:
                connection.execute(sa.update(Notification).where(
                    Notification.id == built[1]).values(**inbox.read_values()))
        return build(**parts)

    monkeypatch.setattr(compose, "build", build_and_be_read)
    mail_run(ctx)
    monkeypatch.setattr(compose, "build", build)
    smtp.inbox.reply = None
    make_due()
    mail_run(ctx)
    read = next(e for e in all_entries() if e.id == built[1])
    assert read.read_at is not None and read.email_state == "skipped"
    assert len(smtp.inbox.recipients) == 2  # the two unread ones


def test_a_mail_the_wiki_fails_to_build_keeps_the_rows_skipped_before(ctx, smtp,
                                                                     monkeypatch):
    """Each write of a run is a statement of its own: when the wiki fails while a mail
    is built, its rows skipped already (email turned off for their category since) stay
    skipped, and the failure is recorded on the others; the same on both databases."""
    set_delay(60)
    edit("handbook/onboarding", "bob", "Edit")
    wiki.add_comment(page("home"), user("carol"), "@alice look")
    run_jobs(ctx)
    prefer("alice", "mention", email=False)
    make_due()

    def unreachable(self, page_ids):
        raise RuntimeError("the wiki's database went away")

    monkeypatch.setattr(DemoHost, "pages", unreachable)
    mail_run(ctx)
    states = {(e.category, e.email_state, e.email_attempts, e.email_error_class)
              for e in entries_for("alice")}
    assert ("mention", "skipped", 0, None) in states
    assert ("watchedPage", "pending", 1, "transient") in states
    assert {state for _, state, _, _ in states} == {"skipped", "pending"}
    assert smtp.inbox.raw == []


@pytest.mark.app_config(smtp=True, MAIL_USERNAME="wiki", MAIL_PASSWORD="wrong")
class TestAuthentication:
    @pytest.fixture
    def smtp(self):
        server = SmtpServer(login=("wiki", "right"))
        server.start()
        yield server
        server.stop()

    def test_a_refused_login_pauses_mail_and_alerts_until_a_send_succeeds(self, ctx, smtp):
        edit("handbook/onboarding", "bob", "Edit")
        run_jobs(ctx)
        states = states_of("alice", "carol")
        assert states == [("pending", 0, "configuration"), ("pending", 0, None)]
        assert relay.paused(ctx)
        client = ctx.test_client()
        login(client, "admin")
        alert = client.get("/_notifications/api/admin/settings").get_json()[
            "status"]["mailAlert"]
        assert alert["errorClass"] == "configuration"
        assert alert["error"].startswith("535 ")
        assert "mail is paused" in client.get("/_notifications/admin").get_data(as_text=True)

        smtp.login = ("wiki", "wrong")  # the relay now takes the wiki's credentials
        make_due()
        mail_run(ctx)
        assert smtp.inbox.raw == []  # paused: no run touches the relay for a minute
        queue.connection(ctx).delete(queue.redis_key(ctx, "mail", "pause"))  # a minute on
        mail_run(ctx)
        assert sorted(smtp.inbox.recipients) == ["alice@example.com", "carol@example.com"]
        status = client.get("/_notifications/api/admin/settings").get_json()["status"]
        assert status["mailAlert"] is None
        assert "mail is paused" not in client.get("/_notifications/admin").get_data(
            as_text=True)


@pytest.mark.app_config(smtp=True, MAIL_USE_TLS=True)  # the relay offers no STARTTLS
class TestStartTls:
    def test_a_tls_failure_is_configuration(self, ctx, smtp):
        edit("handbook/onboarding", "bob", "Edit")
        run_jobs(ctx)
        assert states_of("alice", "carol") == [
            ("pending", 0, "configuration"), ("pending", 0, None)]
        assert "STARTTLS" in next(e for e in all_entries() if e.email_error).email_error
        assert relay.paused(ctx)


# -- item 5: the lease counts from each claim, on the database's clock ------------------------


@pytest.mark.app_config(smtp=True, WIKINOTIFY_MAIL_LEASE=2)
class TestLease:
    def test_a_slow_relay_and_a_second_worker_never_send_one_mail_twice(self, ctx, smtp):
        """Each mail takes 1 s and a claim lasts 2 s: counted from the start of the run,
        the claims of a run's later mails lapsed before they were sent, and a second
        worker sent them again."""
        smtp.inbox.delay = 1.0
        addresses = mail_due_for_readers(7)
        queue.enqueue(ctx, "send_mail")
        queue.enqueue(ctx, "send_mail")
        env = worker_env(ctx)
        first = subprocess.Popen(worker_command(ctx), cwd=ROOT, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: len(smtp.inbox.raw) >= 2, seconds=30)
        second = subprocess.Popen(worker_command(ctx), cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
        received = Counter(smtp.inbox.recipients)
        assert received == Counter(addresses)  # each exactly once
        assert {e.email_state for e in all_entries()} == {"sent"}
