"""The drain's SMTP side: one connection for the whole run, in a thread of its own.

A mail run spends as long waiting on its database as on the relay, and before this
each waited for the other: a mail was claimed and built, then handed over, and the next
claim began once the relay had answered. A :class:`Sender` takes one built mail at a time
and talks to the relay in its thread (which waits on the socket with the GIL released)
while the run claims and builds the next. The run still waits for each mail's answer,
and commits its ``sent`` mark, before it hands over another: only ever one mail is with
the relay without a committed mark (:mod:`wikinotify.mail.drain`).

The thread touches no database session: it is given a message written out already
(:meth:`.compose.NotificationMessage.freeze`) and has the SMTP connection only.
"""

from __future__ import annotations

import logging
import queue
import smtplib
import sys
import threading

from flask import Flask
from flask_mail import Message

from . import relay

log = logging.getLogger(__name__)

#: How often a wait for the relay's answer looks whether the thread is still there.
_CHECK_SECONDS = 1.0
#: How long the run's thread keeps the GIL while the sending thread waits for it
#: (Python's default: 5 ms). The relay's every answer wakes the sending thread, which
#: needs the GIL to read it; at the default it waited behind a mail being built for up
#: to 5 ms each time, four times a mail, and the run then waited for the relay. At 0.5
#: ms (until 2026-12-06), once a digest's build had become shorter than the relay's
#: conversation paced so, the run waited 0.95 ms a mail for the answer; at 0.1 ms, 0.17
#: (an in-process drain of bench/drain.py's digests, alternating: 224 mails/s against
#: 207-210). The run thread is asked for the GIL only at those few wake-ups a mail.
SWITCH_INTERVAL = 0.0001


class _Smtp:
    """One SMTP connection for the whole run, opened at the first mail that needs it."""

    def __init__(self, app: Flask, timeout: float) -> None:
        self.app = app
        self.timeout = timeout
        self._connection: relay.TimedConnection | None = None

    def send(self, message: Message) -> None:
        if self._connection is None:
            mail = self.app.extensions["mail"]
            self._connection = relay.TimedConnection(mail, self.timeout).__enter__()
        try:
            self._connection.send(message)
        except Exception:
            self.close()  # the next mail reconnects
            raise

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None or connection.host is None:
            return
        try:
            # Flask-Mail 0.10 annotates __exit__'s arguments as never None; `with` passes None.
            connection.__exit__(None, None, None)  # type: ignore[arg-type]
        except (smtplib.SMTPException, OSError):
            connection.host.close()  # the server went away; nothing to say goodbye to


class Sender:
    """Sends one mail at a time in a thread of its own, started at the first mail."""

    def __init__(self, app: Flask, timeout: float) -> None:
        self._smtp = _Smtp(app, timeout)
        self._mails: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._switch_interval = sys.getswitchinterval()
        #: Whether a mail was handed over whose answer has not been asked for.
        self.busy = False

    def send(self, message: Message) -> None:
        """Hand ``message`` to the relay and return at once; :meth:`answer` waits for it."""
        if self.busy:
            raise RuntimeError("a mail is with the relay already")
        if self._thread is not None and not self._thread.is_alive():
            raise RuntimeError("the SMTP thread ended")  # nobody would answer
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wikinotify-smtp",
                                            daemon=True)
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(SWITCH_INTERVAL, self._switch_interval))
            self._thread.start()
        self.busy = True
        self._mails.put(message)

    def answer(self) -> BaseException | None:
        """Wait for the mail handed over last: ``None`` if the relay took it, else why
        it did not (the relay's error, or the message's own on the way out)."""
        if not self.busy or self._thread is None:
            raise RuntimeError("no mail is with the relay")
        while True:
            try:
                answer = self._answers.get(timeout=_CHECK_SECONDS)
                break
            except queue.Empty:
                if not self._thread.is_alive():
                    answer = RuntimeError("the SMTP thread ended")
                    break
        self.busy = False
        return answer

    def close(self) -> None:
        """Say goodbye to the relay and end the thread. A mail still with the relay is
        not waited for beyond the relay's timeout."""
        if self._thread is None:
            return
        self._mails.put(None)
        self._thread.join(timeout=self._smtp.timeout + _CHECK_SECONDS)
        sys.setswitchinterval(self._switch_interval)
        if self._thread.is_alive():
            log.warning("wikinotify: the SMTP thread did not end within the relay's timeout")

    def _run(self) -> None:
        # Flask-Mail's connection tells its signal the app that sent: an app context of
        # the thread's own (it opens no database session).
        try:
            with self._smtp.app.app_context():
                while (message := self._mails.get()) is not None:
                    try:
                        self._smtp.send(message)
                    except BaseException as error:
                        self._answers.put(error)
                    else:
                        self._answers.put(None)
        finally:
            self._smtp.close()
