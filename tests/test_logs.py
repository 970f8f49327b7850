"""The logs an operator sees (docs/operating.md#logs): each job run's one line reaches the output
of the plain ``rq worker`` the README runs, with the ids it worked on as structured fields;
wikinotify prints its lines itself only when the process has no logging set-up of its own;
and the documented ``dictConfig`` prints them as JSON."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from tests.helpers.jobs import run_jobs, run_worker
from tests.helpers.wiki import edit, events
from wikinotify import telemetry
from wikinotify.mail.drain import DrainReport
from wikinotify.pipeline.events import DispatchReport
from wikinotify.queue import Job

ROOT = Path(__file__).resolve().parent.parent
POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def logging_restored():
    """Whatever a test does to the logging set-up, put back as it was."""
    loggers = [logging.getLogger(), logging.getLogger("wikinotify")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


@POSTGRESQL
def test_the_plain_rq_worker_prints_each_runs_line_with_its_ids(app):
    with app.app_context():
        edit("handbook/onboarding", "bob", "A paragraph for the log.")
        [event] = events()
    result = run_worker(app, forking=True)  # RQ's own forking worker, no flag of ours
    output = result.stdout + result.stderr
    [line] = [line for line in output.splitlines() if "wikinotify: dispatch" in line]
    assert re.search(r"INFO wikinotify\.telemetry: wikinotify: dispatch claimed=1 finished=1 ",
                     line), line
    assert f"event_ids=[{event.id}]" in line


def test_no_handler_is_added_when_the_host_set_logging_up(logging_restored):
    root, ours = logging.getLogger(), logging.getLogger("wikinotify")
    ours.handlers.clear()
    ours.setLevel(logging.NOTSET)
    root.handlers[:] = [logging.NullHandler()]  # the host's basicConfig, dictConfig…
    telemetry.log_to_stderr_unless_configured()
    assert ours.handlers == [] and ours.level == logging.NOTSET

    root.handlers.clear()  # nothing set up: a plain `rq worker`
    telemetry.log_to_stderr_unless_configured()
    telemetry.log_to_stderr_unless_configured()  # a second app built in the same process
    [handler] = ours.handlers
    assert ours.level == logging.INFO


def test_a_run_that_did_nothing_logs_at_debug_and_one_that_worked_at_info(ctx, caplog):
    caplog.set_level(logging.DEBUG, logger="wikinotify")
    telemetry.reported(ctx, Job.DISPATCH, DispatchReport())
    telemetry.reported(ctx, Job.SEND_MAIL, DrainReport(mails=1, sent=2, sent_ids=[7, 8]))
    idle, worked = caplog.records
    assert (idle.levelname, worked.levelname) == ("DEBUG", "INFO")
    assert worked.wikinotify_job == "send_mail"
    assert worked.notification_ids == [7, 8]
    assert worked.wikinotify_figures["mails"] == 1


def test_a_big_runs_ids_are_capped_in_its_fields_with_a_count_of_the_rest(ctx, caplog):
    """A mail run of thousands of entries: its line carries the first
    telemetry.FIELD_IDS of them, and how many more there were."""
    caplog.set_level(logging.INFO, logger="wikinotify")
    sent = list(range(1, 2_501))
    telemetry.reported(ctx, Job.SEND_MAIL, DrainReport(mails=2_500, sent=2_500,
                                                       sent_ids=sent))
    [line] = caplog.records
    assert telemetry.FIELD_IDS == 1_000
    assert line.notification_ids == sent[:1_000]
    assert line.notification_ids_more == 1_500
    assert line.failed_notification_ids == []
    assert line.failed_notification_ids_more == 0
    assert ",+2490]" in line.getMessage()  # the message's own ten, and the count of all


def documented_logging_config() -> str:
    """The Python example of docs/operating.md's "Logs" section."""
    text = (ROOT / "docs" / "operating.md").read_text()
    section = text.split("\n## Logs\n", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


@POSTGRESQL
def test_the_documented_config_prints_each_runs_line_as_json_with_its_fields(
        ctx, capsys, logging_restored):
    exec(documented_logging_config(), {})
    edit("handbook/onboarding", "bob", "A paragraph for the JSON log.")
    [event] = events()
    run_jobs(ctx)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()
             if line.startswith("{")]
    [dispatch] = [line for line in lines if line.get("wikinotify_job") == "dispatch"]
    assert dispatch["event_ids"] == [event.id]
    assert dispatch["level"] == "INFO" and dispatch["logger"] == "wikinotify.telemetry"
    assert dispatch["wikinotify_figures"]["claimed"] == 1
    assert dispatch["message"].startswith("wikinotify: dispatch claimed=1")
