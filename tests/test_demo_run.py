"""``flask --app wsgi demo run`` shows the whole loop fast (docs/rules.md#mail-cadence): a new demo
database mails 30 s after an event and the banner says so, while the library's default
stays 3 minutes and a delay chosen since is kept across restarts. Each test starts the
real command, with its worker, cron and SMTP sink, and stops it with SIGTERM."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from demo.cli import DEMO_EMAIL_DELAY
from demo.models import db
from tests.helpers.app import ROOT
from tests.helpers.smtp import free_port
from wikinotify.instance_settings import instance_settings

#: How long the command may take to migrate, seed and print its banner.
START_TIMEOUT = 90


def demo_run(tmp_path, redis_url: str) -> str:
    """Start ``demo run`` on the SQLite file in ``tmp_path``, return its banner once it
    has printed it, and stop it."""
    queue_name = f"demo-run-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PORT": str(free_port()),
        "FLASK_SECRET_KEY": "test",
        "FLASK_SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "FLASK_MAIL_PORT": str(free_port()),
        "FLASK_DEMO_MAILBOX": str(tmp_path / "mailbox"),
        "FLASK_WIKINOTIFY_REDIS_URL": redis_url,
        "FLASK_WIKINOTIFY_QUEUE": queue_name,
    }
    env.pop("FLASK_APP", None)
    with subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "wsgi", "demo", "run"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as process:
        lines: queue.Queue[str] = queue.Queue()
        # Reads to the end: the worker and the cron write to the same pipe, and it ends
        # when the command has stopped them too.
        reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stdout])
        reader.start()
        try:
            return _banner(process, lines)
        finally:
            process.terminate()  # SIGTERM: the command stops its worker, cron and sink
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # Fail, never hang the suite: the with-block's exit would wait forever.
                for pid in [process.pid, *children(process.pid)]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                process.wait(timeout=30)
                raise AssertionError("demo run went on serving after a SIGTERM") from None
            reader.join(timeout=30)
            assert running(queue_name) == [], "demo run left its worker behind"


def children(parent: int) -> list[int]:
    """The processes ``parent`` started (the demo's worker, cron and embedded Redis)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(pid))
        except (OSError, IndexError, ValueError):
            pass  # gone meanwhile
    return found


def running(text: str) -> list[int]:
    """The processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            pass  # gone meanwhile
    return found


def _banner(process: subprocess.Popen, lines: queue.Queue[str]) -> str:
    """What ``process`` printed up to its banner's line about mail timing."""
    seen: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    while not any(line.startswith("Mail is sent") for line in seen):
        assert process.poll() is None, "".join(seen)
        try:
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError("no banner:\n" + "".join(seen)) from None
    return "".join(seen)


def stored_delay(tmp_path) -> int:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'demo.sqlite3'}")
    try:
        with engine.connect() as connection:
            return connection.scalar(sa.text(
                "SELECT email_delay_seconds FROM wikinotify_instance_settings"))
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_new_demo_mails_after_thirty_seconds_and_a_delay_chosen_since_is_kept(
        tmp_path, redis_url):
    banner = demo_run(tmp_path, redis_url)
    assert DEMO_EMAIL_DELAY == 30
    assert stored_delay(tmp_path) == 30
    assert ("Mail is sent 30 s after an event, at the next minute's mail run (the library's "
            "default is 3 min; change it in Admin → Notifications).") in banner

    # What an administrator would do in Admin → Notifications; a restart keeps it.
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'demo.sqlite3'}")
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE wikinotify_instance_settings "
                                   "SET email_delay_seconds = 120"))
    engine.dispose()
    banner = demo_run(tmp_path, redis_url)
    assert stored_delay(tmp_path) == 120
    assert "Mail is sent 2 min after an event" in banner


def test_the_librarys_default_stays_three_minutes(app):
    with app.app_context():
        assert instance_settings(db.session).email_delay_seconds == 180
