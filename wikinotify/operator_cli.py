"""``flask wikinotify status`` and ``flask wikinotify retry``
(docs/operating.md#the-status-command): Admin → Notifications' figures and warnings on the
command line, for an operator, cron or a monitor, and the administrator's retries of what
was given up on.

``status`` exits 0 when all is well, 1 when something needs attention (any warning), 2 when
the database or Redis cannot be reached (:mod:`wikinotify.health`'s checks, as ``/readyz``
asks them). ``retry`` exits 1 when an id named no failed item, after retrying the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click
from flask import Flask, current_app
from flask.cli import with_appcontext
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from . import health, vitals
from .inbox import parse_id
from .mail.setup import mail_problem
from .models import utcnow
from .retries import RETRIES, Actor, Kind, failed_among, failed_ids, retry
from .schemas.administration import VitalsSchema
from .state import state

#: ``--all`` revives this many items, then commits, then takes the next so many.
RETRY_BATCH = 500

#: The command's names for each kind, as the operator types them.
KINDS = {"events": Kind.EVENT, "mails": Kind.MAIL, "deliveries": Kind.DELIVERY}

#: What to check when a dependency does not answer.
UNREACHABLE = {
    "database": "The database cannot be reached within {timeout:g} s: check that it runs "
                "and that SQLALCHEMY_DATABASE_URI names it.",
    "redis": "Redis cannot be reached within {timeout:g} s: check that it runs and that "
             "WIKINOTIFY_REDIS_URL names it.",
}
UNREADABLE = ("The database answers, but wikinotify's tables cannot be read ({error}): run "
              "flask db upgrade.")
TIMED_OUT = ("The database did not answer wikinotify's queries within {timeout:g} s: a "
             "lock held for long, or a database too busy; check what holds wikinotify's tables "
             "(pg_stat_activity).")
SCHEMA_BEHIND = ("The database's schema is not at wikinotify's head: run flask db upgrade "
                 "(a database built without Alembic: flask db stamp heads).")

_vitals_schema = VitalsSchema()


def _app() -> Flask:
    # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    return app


def _session() -> Session:
    return state().db.session()


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Answer in JSON, for a program.")
@with_appcontext
def status(as_json: bool) -> None:
    """Show what Admin → Notifications shows: the backlog and its age, mail, deliveries,
    the queues, the workers and rq cron RQ sees, and what needs attention. Exit status: 0
    all is well, 1 something needs attention, 2 the database or Redis cannot be reached."""
    app = _app()
    readiness = health.readiness(app)
    down = [name for name in UNREACHABLE if getattr(readiness, name) != health.OK]
    if down:
        timeout = float(app.config["WIKINOTIFY_READY_TIMEOUT"])
        error = " ".join(UNREACHABLE[name].format(timeout=timeout) for name in down)
        _say(as_json, {"readiness": readiness.as_dict(), "error": error}, error, err=True)
        raise SystemExit(2)
    try:
        vital = vitals.measure(_session(), app, now=utcnow())
    except SQLAlchemyError as error:  # it answers, but holds no wikinotify tables, or hangs
        message = UNREADABLE.format(error=type(error).__name__)
        if getattr(getattr(error, "orig", None), "sqlstate", None) == vitals.TIMED_OUT:
            message = TIMED_OUT.format(timeout=float(app.config["WIKINOTIFY_READY_TIMEOUT"]))
        _say(as_json, {"readiness": readiness.as_dict(), "error": message}, message, err=True)
        raise SystemExit(2) from None
    warnings = vital.warnings()
    if readiness.schema != health.OK:
        warnings.append(SCHEMA_BEHIND)
    # Why mail cannot be sent is said, never warned of: a wiki may mean to send none, and a
    # monitor must not read that choice as trouble for ever.
    mail = mail_problem(app)
    body = {"readiness": readiness.as_dict(), "countCap": vitals.COUNT_CAP,
            "vitals": _vitals_schema.dump(vital), "mailProblem": mail, "warnings": warnings}
    _say(as_json, body, _report(vital, readiness, mail, warnings))
    raise SystemExit(1 if warnings else 0)


def _say(as_json: bool, body: dict[str, Any], text: str, *, err: bool = False) -> None:
    click.echo(json.dumps(body, indent=2) if as_json else text, err=err and not as_json)


def _report(vital: vitals.Vitals, readiness: health.Readiness, mail: str | None,
            warnings: list[str]) -> str:
    """The human-readable status: one figure a line, then the warnings."""
    lines = [
        f"wikinotify status at {utcnow():%Y-%m-%d %H:%M:%S} UTC",
        "",
        _line("Database", readiness.database),
        _line("Redis", readiness.redis),
        _line("Schema", "at wikinotify's head" if readiness.schema == health.OK else "behind"),
        "",
        _line("Events waiting", _count(vital.events_waiting)
              + _after(vital.oldest_waiting_age, "the oldest waited {}")),
        _line("Dead letters", _count(vital.dead_letters)),
        _line("Mail", "can be sent" if mail is None else f"not sent: {mail}"),
        _line("Mail entries pending", f"{_count(vital.mail_entries_pending)} "
              f"(due now: {_count(vital.mail_entries_due)})"),
        _line("Mail failed, 24 h", _count(vital.mail_failed_24h)),
        _line("Deliveries waiting", _count(vital.deliveries_waiting)),
        _line("Deliveries failed, 24 h", f"{_count(vital.deliveries_failed_24h)} "
              f"(among the latest {vitals.COUNT_CAP})"),
        "",
        _line("Queued jobs", ", ".join(f"{name} {length}"
                                       for name, length in vital.queue_lengths.items())
              or "unknown"),
        _line("Workers", str(vital.workers) if vital.redis_reachable else "unknown"),
        _line("rq cron", "not seen" if vital.cron_last_seen_age is None
              else f"last seen {_duration(vital.cron_last_seen_age)} ago"),
        "",
    ]
    if not warnings:
        return "\n".join([*lines, "All is well."])
    needs = "1 thing needs" if len(warnings) == 1 else f"{len(warnings)} things need"
    return "\n".join([*lines, f"{needs} attention:", *(f"  - {warning}" for warning in warnings)])


def _line(label: str, value: str) -> str:
    return f"  {label + ':':<25}{value}"


def _count(n: int) -> str:
    return vitals.counted(n)


def _after(seconds: float | None, words: str) -> str:
    return "" if seconds is None else f" ({words.format(_duration(seconds))})"


def _duration(seconds: float) -> str:
    """``42 s``, ``12 min 5 s``, ``3 h 20 min``: what an operator reads at a glance."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


@click.command("retry")
@click.argument("kind", type=click.Choice(sorted(KINDS)))
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True,
              help=f"Retry every failed one of KIND, {RETRY_BATCH} at a time.")
@with_appcontext
def retry_command(kind: str, ids: tuple[str, ...], every: bool) -> None:
    """Retry failed events (dead letters), mails or webhook and chat deliveries, by ID or
    --all, as Admin → Notifications' Retry does: each one audited, the command line as its
    actor. Exit status 1 if an ID named no failed one (the others are retried)."""
    if every == bool(ids):
        raise click.UsageError("Give the IDs to retry, or --all (not both).")
    what, app, actor = KINDS[kind], _app(), Actor.command_line()
    if every:
        done = sum(_retry_all(batch, what, actor)
                   for batch in failed_ids(_session(), what, batch=RETRY_BATCH))
        unknown: list[str] = []
    else:
        done, unknown = _retry_ids(ids, what, actor)
    if done:
        RETRIES[what].kick(app)
    for raw in unknown:
        click.echo(f"{raw}: {RETRIES[what].missing}", err=True)
    if done:
        noun, pronoun = (what.value, "it") if done == 1 else (kind, "them")
        click.echo(f"Retried {done} {noun}; the next run takes {pronoun} within a minute.")
    else:
        click.echo(f"Retried no {what.value}.")
    raise SystemExit(1 if unknown else 0)


def _retry_all(batch: Iterable[int], what: Kind, actor: Actor) -> int:
    """Retry one batch of failed ids and commit it. A mail's other rows are revived with
    the first of them: those then count for nothing, and are not errors."""
    session = _session()
    done = sum(retry(session, state().host, what, item_id, actor) for item_id in batch)
    session.commit()
    return done


def _retry_ids(raw_ids: Iterable[str], what: Kind, actor: Actor) -> tuple[int, list[str]]:
    """Retry the ids given and commit. An id failed when the run began but no more when its
    turn came was revived with an earlier one (two rows of one mail): done, not unknown,
    and not counted twice."""
    session, done, unknown = _session(), 0, []
    parsed = {raw: parse_id(raw) for raw in raw_ids}
    failed = failed_among(session, what, [item for item in parsed.values() if item is not None])
    for raw, item_id in parsed.items():
        if item_id is not None and retry(session, state().host, what, item_id, actor):
            done += 1
        elif item_id not in failed:
            unknown.append(raw)
    session.commit()
    return done, unknown
