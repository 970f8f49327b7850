"""The SMTP relay as the mail drain meets it: a connection with timeouts, what each
failure means (its class, as docs/rules.md#channels has them), and what the relay told every
worker, kept in Redis: a pause after a configuration failure, the alert Admin →
Notifications shows until a send succeeds, and a smaller batch after a "slow down".

======================  ==========================================================
class                   what becomes of the mail's rows, and of the run
======================  ==========================================================
``transient``           pending after the back-off, one attempt burnt; a failure
                        of the connection (refused, timed out, dropped) stops the run
``permanent``           failed at once (a 5xx for this message or this recipient)
``rate_limit``          pending after :data:`RATE_LIMIT_WAIT`, no attempt burnt; the
                        run stops and the next one takes half the batch
``configuration``       pending after :data:`PAUSE_SECONDS`, no attempt burnt; the run
                        stops, the drain pauses, Admin shows an alert
======================  ==========================================================
"""

from __future__ import annotations

import json
import logging
import smtplib
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import Flask
from flask_mail import BadHeaderError, Connection
from redis.exceptions import RedisError

from .. import queue
from ..models import ErrorClass, utcnow
from . import compose

log = logging.getLogger(__name__)

# The classes a relay's answer falls in (the drain's names for them).
TRANSIENT = ErrorClass.TRANSIENT
PERMANENT = ErrorClass.PERMANENT
RATE_LIMIT = ErrorClass.RATE_LIMIT
CONFIGURATION = ErrorClass.CONFIGURATION

#: Replies that mean "slow down": 421 closes the session (too many connections or
#: messages), 451 is how most relays say "try later" when they throttle.
SLOW_DOWN = frozenset({421, 451})
#: How long rows the relay throttled wait before they are tried again.
RATE_LIMIT_WAIT = timedelta(seconds=60)
#: How long a configuration failure pauses every worker's drain.
PAUSE_SECONDS = 60
#: A lowered batch is forgotten after this long even if no clean run restores it.
LOWERED_BATCH_SECONDS = 3600


@dataclass(frozen=True)
class Failure:
    """Why one mail did not go: its class, and the server's reply (or the error)."""

    kind: str
    reason: str
    #: Whether the run stops here: the relay, not this one mail, is the trouble.
    stops_run: bool = False


def _reply(code: int, message: bytes | str) -> str:
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    return f"{code} {text}"


def classify(error: BaseException) -> Failure:
    """The class of a failure to build or send one mail.

    A 5xx about this message or its recipient (``RCPT``, ``DATA``) is permanent for
    them; a 5xx about the session (greeting, ``HELO``, ``MAIL FROM``) and any
    authentication or TLS failure is the wiki's configuration. Anything unexpected is
    transient: retried, then failed with its reason, and never stops the run.
    """
    if isinstance(error, compose.Unbuildable | BadHeaderError | UnicodeError):
        return Failure(PERMANENT, f"the message cannot be built: {error}")
    if isinstance(error, smtplib.SMTPAuthenticationError):
        reply = _reply(error.smtp_code, error.smtp_error)
        return Failure(CONFIGURATION, reply, stops_run=True)
    if isinstance(error, ssl.SSLError | smtplib.SMTPNotSupportedError):
        return Failure(CONFIGURATION, f"{type(error).__name__}: {error}", stops_run=True)
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        [(address, (code, message))] = list(error.recipients.items())[:1]
        return _by_code(code, f"{_reply(code, message)} ({address})", about_message=True)
    if isinstance(error, smtplib.SMTPResponseException):
        about_message = isinstance(error, smtplib.SMTPDataError)
        return _by_code(error.smtp_code, _reply(error.smtp_code, error.smtp_error),
                        about_message=about_message)
    if isinstance(error, smtplib.SMTPException | OSError):
        # Refused, timed out, dropped: the relay is out of reach for everyone, and a
        # hanging one would hold every remaining mail for a timeout each.
        return Failure(TRANSIENT, f"{type(error).__name__}: {error}", stops_run=True)
    return Failure(TRANSIENT, f"{type(error).__name__}: {error}")


def _by_code(code: int, reason: str, *, about_message: bool) -> Failure:
    if code in SLOW_DOWN:
        return Failure(RATE_LIMIT, reason, stops_run=True)
    if 500 <= code < 600:
        if about_message:
            return Failure(PERMANENT, reason)
        return Failure(CONFIGURATION, reason, stops_run=True)
    # Another 4xx: this mail is retried; one about the session means the relay is unwell.
    return Failure(TRANSIENT, reason, stops_run=not about_message)


class TimedConnection(Connection):
    """Flask-Mail's connection with a connect and read timeout.

    Flask-Mail 0.10 builds ``smtplib.SMTP(server, port)`` with no timeout, and neither
    ``Mail.connect()`` nor ``Connection`` takes one, so this repeats its short
    ``configure_host`` with ``timeout=``: smtplib applies it to the connect and to every
    read and write after it. A failed STARTTLS or login closes the socket it opened.
    """

    def __init__(self, mail: Any, timeout: float) -> None:
        super().__init__(mail)
        self.timeout = timeout

    def configure_host(self) -> smtplib.SMTP:
        mail = self.mail
        factory = smtplib.SMTP_SSL if mail.use_ssl else smtplib.SMTP
        host = factory(mail.server, mail.port, timeout=self.timeout)
        try:
            host.set_debuglevel(int(mail.debug))
            if mail.use_tls:
                host.starttls()
            if mail.username and mail.password:
                host.login(mail.username, mail.password)
        except BaseException:
            host.close()
            raise
        return host


# -- what the relay told every worker, in Redis --------------------------------------------


def _key(app: Flask, name: str) -> str:
    return queue.redis_key(app, "mail", name)


def paused(app: Flask) -> bool:
    """Whether a configuration failure paused the drain less than a minute ago."""
    return bool(queue.connection(app).exists(_key(app, "pause")))


def batch(app: Flask, setting: int) -> int:
    """The run's batch: the instance setting, or less while the relay asks to slow down."""
    lowered = queue.connection(app).get(_key(app, "batch"))
    return min(setting, int(lowered)) if lowered is not None else setting


def after_run(app: Flask, stopped: Failure | None, *, batch_used: int, mails: int) -> None:
    """Remember what a run learned: a sent mail clears the alert; a configuration
    failure pauses the drain and raises the alert; a "slow down" halves the batch; a
    clean run restores it."""
    client = queue.connection(app)
    pipe = client.pipeline(transaction=True)
    if mails:
        pipe.delete(_key(app, "alert"))
    if stopped is None:
        pipe.delete(_key(app, "batch"))
    elif stopped.kind == CONFIGURATION:
        alert = {"errorClass": stopped.kind, "error": stopped.reason,
                 "at": utcnow().isoformat()}
        pipe.set(_key(app, "pause"), 1, ex=PAUSE_SECONDS)
        pipe.set(_key(app, "alert"), json.dumps(alert))
        log.error("wikinotify: mail paused for %d s: %s", PAUSE_SECONDS, stopped.reason)
    elif stopped.kind == RATE_LIMIT:
        pipe.set(_key(app, "batch"), max(1, batch_used // 2), ex=LOWERED_BATCH_SECONDS)
    pipe.execute()


def alert(app: Flask) -> dict[str, Any] | None:
    """The configuration failure Admin → Notifications shows until a send succeeds;
    ``None`` when there is none, or when Redis cannot say (the page still answers)."""
    try:
        raw = queue.connection(app).get(_key(app, "alert"))
    except (RedisError, OSError) as error:
        log.warning("wikinotify: could not read the mail alert (%s)", error)
        return None
    if raw is None:
        return None
    value = json.loads(raw)
    return {**value, "at": datetime.fromisoformat(value["at"])}
