"""What an operator sees of each job run (docs/operating.md#logs, docs/operating.md#metrics):
its one log line, with the ids it worked on as structured fields, and what it adds to
the counters (:mod:`wikinotify.counters`). Both are made from the run's report here, in
one place, so the log and the metrics never tell two stories.

And the one handler wikinotify gives its own loggers when nothing else would print them
(:func:`log_to_stderr_unless_configured`): RQ configures only its ``rq.worker`` logger,
so without it a plain ``rq worker`` prints no line of wikinotify's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flask import Flask

from . import counters
from .mail.drain import DrainReport
from .outbound.engine import RunReport
from .pipeline.events import DispatchReport
from .pipeline.ranges import RangeReport
from .queue import Job

log = logging.getLogger(__name__)

#: The ids a log line names in its message.
SHOWN_IDS = 10
#: The ids each structured field carries: a mail run's line names thousands otherwise, a
#: record too big for many log shippers. ``<field>_more`` counts the rest.
FIELD_IDS = 1_000

#: What a job returns to report: a fan-out run's report, a range run's list of them, a
#: mail run's (``None``: mail is off or paused), a delivery run's, or purge's counts.
Report = DispatchReport | Sequence[RangeReport] | DrainReport | RunReport | Mapping[str, int] | None


@dataclass
class Told:
    """What a run's report tells: its figures (the line's message), the ids it worked on
    (structured fields), and what it adds to the counters (hash field → how many)."""

    figures: dict[str, Any] = field(default_factory=dict)
    ids: dict[str, list[int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Reporting:
    """A run's report while it runs: the job sets it as soon as the report exists, and
    the report grows with the work the run commits."""

    report: Report = None


@contextlib.contextmanager
def reporting(app: Flask, job: Job) -> Iterator[Reporting]:
    """Report ``job``'s run as the block ends (:func:`reported`), even when it raises:
    a mail run that sent 200 mails and then lost its database, or met RQ's job timeout,
    still counts and logs them, at WARNING, as having ended early."""
    run = Reporting()
    try:
        yield run
    except BaseException:
        reported(app, job, run.report, early=True)
        raise
    reported(app, job, run.report)


def reported(app: Flask, job: Job, report: Report, *, early: bool = False) -> None:
    """Log ``job``'s run as one line and add its totals to the counters. A run that did
    nothing (the minute cron's, mostly) logs at DEBUG, so the log shows work; one that
    ``early`` ended on an error logs what it had done at WARNING."""
    told = _told(report)
    level = logging.INFO if any(told.figures.values()) else logging.DEBUG
    extra = {"wikinotify_job": str(job), "wikinotify_figures": told.figures,
             **_fields(told.ids)}
    if early:
        log.warning("wikinotify: %s ended early: %s", job, _line(told), extra=extra)
    else:
        log.log(level, "wikinotify: %s %s", job, _line(told), extra=extra)
    counters.add(app, told.counts)


def _fields(ids: Mapping[str, list[int]]) -> dict[str, Any]:
    """Each id field, its first :data:`FIELD_IDS` ids, and ``<field>_more``: how many
    more it had."""
    fields: dict[str, Any] = {}
    for name, all_ids in ids.items():
        fields[name] = all_ids[:FIELD_IDS]
        fields[f"{name}_more"] = max(0, len(all_ids) - FIELD_IDS)
    return fields


def _line(told: Told) -> str:
    words = [f"{name}={value}" for name, value in told.figures.items()]
    for name, ids in told.ids.items():
        if ids:
            shown = ",".join(str(i) for i in ids[:SHOWN_IDS])
            more = f",+{len(ids) - SHOWN_IDS}" if len(ids) > SHOWN_IDS else ""
            words.append(f"{name}=[{shown}{more}]")
    return " ".join(words)


def _told(report: Report) -> Told:
    if isinstance(report, DispatchReport):
        return _dispatch(report)
    if isinstance(report, DrainReport):
        return _mail(report)
    if isinstance(report, RunReport):
        return _deliveries(report)
    if isinstance(report, Mapping):
        return Told(figures=dict(report))
    if report is None:
        return Told()
    return _ranges(report)


def _dispatch(report: DispatchReport) -> Told:
    return Told(
        figures={"claimed": report.claimed, "finished": report.finished,
                 "split": report.split, "deferred": report.deferred,
                 "failed": report.failed, "written": report.written,
                 "interrupted": report.interrupted},
        ids={"event_ids": report.event_ids, "failed_event_ids": report.failed_ids,
             "dead_event_ids": report.dead_ids},
        counts={counters.EVENTS_FANNED_OUT.field(): report.finished,
                counters.EVENT_FAILURES.field(): report.failed,
                counters.EVENTS_DEAD.field(): len(report.dead_ids),
                counters.ENTRIES_WRITTEN.field(): report.written},
    )


def _ranges(reports: Sequence[RangeReport]) -> Told:
    processed = sum(r.processed for r in reports)
    failed = [r for r in reports if r.failed]
    dead = [r.event_id for r in failed if r.dead and r.event_id is not None]
    written = sum(r.written for r in reports)
    return Told(
        figures={"ranges": len(reports), "done": sum(r.done for r in reports),
                 "processed": processed, "deferred": sum(r.deferred for r in reports),
                 "failed": len(failed), "written": written},
        ids={"event_ids": sorted({r.event_id for r in reports if r.event_id is not None}),
             "range_ids": [r.range_id for r in reports],
             "failed_range_ids": [r.range_id for r in failed],
             "dead_event_ids": dead},
        counts={counters.EVENTS_FANNED_OUT.field(): processed,
                counters.EVENT_FAILURES.field(): len(failed),
                counters.EVENTS_DEAD.field(): len(dead),
                counters.ENTRIES_WRITTEN.field(): written},
    )


def _mail(report: DrainReport) -> Told:
    counts = {counters.MAILS_SENT.field(): report.mails}
    counts.update({counters.MAIL_FAILURES.field(kind): n
                   for kind, n in report.failures.items()})
    counts.update({counters.MAIL_SKIPPED.field(reason): n
                   for reason, n in report.skipped_by.items()})
    return Told(
        figures={"mails": report.mails, "sent": report.sent, "skipped": report.skipped,
                 "retried": report.retried, "failed": report.failed, "held": report.held,
                 "postponed": report.postponed,
                 "stopped": report.stopped.kind if report.stopped else None},
        ids={"notification_ids": report.sent_ids,
             "failed_notification_ids": report.failed_ids},
        counts=counts,
    )


def _deliveries(report: RunReport) -> Told:
    return Told(
        figures={"delivered": report.delivered, "retried": report.retried,
                 "failed": report.failed, "blocked": report.blocked,
                 "ineligible": report.ineligible, "disabled": report.disabled},
        ids={"delivery_ids": report.delivered_ids,
             "failed_delivery_ids": report.failed_ids},
        counts={counters.DELIVERIES.field(channel, state): n
                for channel, by_state in report.outcomes.items()
                for state, n in by_state.items()},
    )


#: The format of the line :func:`log_to_stderr_unless_configured` prints.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to_stderr_unless_configured() -> None:
    """Print wikinotify's INFO lines to stderr, unless the process has a logging set-up
    of its own: a handler on the ``wikinotify`` logger or on the root logger. Called
    where a job builds the wiki's app, like Flask's own ``default_handler``: a host's
    logging configuration (``dictConfig``, ``basicConfig``, gunicorn's) always wins."""
    logger = logging.getLogger("wikinotify")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


#: What every log record has, whoever made it: the rest are a caller's ``extra=`` fields.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: the time, level, logger and message, and every
    structured field the record carries (wikinotify's are in docs/operating.md#logs). For
    ``logging.config.dictConfig``: ``{"()": "wikinotify.telemetry.JsonFormatter"}``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
