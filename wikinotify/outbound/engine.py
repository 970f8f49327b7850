"""The delivery engine: webhook, chat and push deliveries, one row each, claimed under a lease,
sent, and classed (docs/rules.md#channels).

A run claims one due row at a time (:data:`CLAIM`, through :mod:`wikinotify.workqueue`) by
moving it to ``sending``,
counting the attempt and setting ``next_attempt_at`` to the lease's end, all on the
database's clock, and commits. The message is then built, the transaction closed, and
only then is the request made: no transaction is ever open across a receiver's answer.
The result is written in a transaction of its own, guarded by the attempt it belongs to,
so a run whose lease lapsed (another run took the row over) cannot overwrite the newer
attempt's result. A worker killed mid-request leaves its row ``sending``; when the lease
lapses the next run sends it again, with the same ``webhook-id``: delivery is at least
once, and receivers deduplicate on that id.

**Turns** (:class:`Turns`, docs/channels.md#webhooks): which due row a claim takes is fair across
owners, so that one account's slow or hanging receivers delay her own deliveries, not other
people's. Each owner (the site's own endpoints count as one) has one delivery a round, her oldest;
an endpoint whose request failed in a way that is retried is left alone for the rest of
the run; and an owner whose requests took ``WIKINOTIFY_DELIVERY_SHARE`` seconds of the run
waits for the next one.

Before any request the delivery is checked again (:func:`.payloads.build`): the endpoint is
still active, its owner's account still receives, the site is on, the owner still wants
the category on that channel and may still see the page. Anything else is ``ineligible``,
and no request is made. An address the SSRF guard refuses is ``blocked``, also with no
request.

**Classes** (:func:`from_status`): a 2xx is ``delivered``; 408, 5xx and connection
failures (refused, reset, timed out) are ``transient``, and 429 is ``rate_limit``: both
are tried again after the waits of :data:`RETRY`, with jitter (some 32 hours over its
attempts), or after the receiver's ``Retry-After`` (seconds or an
HTTP date, at most :data:`.outcomes.MAX_RETRY_AFTER`); 410 Gone is ``gone`` and disables the
endpoint; a redirect (3xx, never followed: its target was never checked) and every other
4xx are ``permanent`` for that delivery. An endpoint whose deliveries have all failed for
:data:`FAILING_FOR`, tried all along (see :meth:`Run._endpoint_after`), is disabled, and
its owner told in-app.

**Senders.** :data:`SENDERS` maps an endpoint's kind to its sender::

    def send(endpoint: Endpoint, delivery: Delivery, message: Message) -> Outcome

called with no transaction open and the app context pushed. A sender checks every address
it connects to with :mod:`.ssrf` (returning :func:`blocked` without a request when the guard
refuses one), bounds its request by ``WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT`` and
``WIKINOTIFY_OUTBOUND_TIMEOUT``, follows no redirect, never raises for what the receiver
or the network did (it returns :func:`from_status` or :func:`unreachable`), and never
puts a secret in ``Outcome.error``. ``webhook`` is :func:`.webhook.send`; ``push`` is
:func:`.push.send_push` (a ``gone`` push subscription is removed, not disabled);
``chat`` is ``send_chat`` of :mod:`.chat`, registered when that module provides it.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from flask import Flask
from sqlalchemy.orm import Session

from .. import dialects, queue, workqueue
from ..categories import Registry, endpoint_disabled
from ..config import DEFAULT_CONFIG, config
from ..host import Host
from ..models import (
    DELIVERY_NOT_SENT,
    Delivery,
    DeliveryState,
    Endpoint,
    EndpointKind,
    EndpointState,
    sql_in,
    utcnow,
)
from . import endpoints, notices, payloads, push, push_subscriptions, verification, webhook
from .endpoints import SITE, owner_key
from .outcomes import (
    BLOCKED,
    DELIVERED,
    GONE,
    INELIGIBLE,
    PERMANENT,
    RETRIED,
    Message,
    Outcome,
    Sender,
    blocked,
    from_status,
    unreachable,
)

__all__ = ["SENDERS", "Message", "Outcome", "Sender", "blocked", "from_status", "kick",
           "run", "sender", "unreachable"]

log = logging.getLogger(__name__)

#: Eight attempts, then ``failed``; the waits between them (each stretched or shrunk by up
#: to a fifth, so that the deliveries of an endpoint that came back do not all arrive at
#: the same second) come to about 32 hours; an error is kept to 500 characters.
RETRY = workqueue.RetryPolicy(
    attempts=8,
    waits=(
        timedelta(minutes=1),
        timedelta(minutes=5),
        timedelta(minutes=30),
        timedelta(hours=2),
        timedelta(hours=5),
        timedelta(hours=10),
        timedelta(hours=14),
    ),
    jitter=0.2,
    error_length=500,
)
#: An endpoint whose deliveries have all failed this long is disabled.
FAILING_FOR = timedelta(days=3)
#: Longer than any wait between two attempts (the longest back-off with its jitter, some
#: 17 hours; a ``Retry-After``, at most 24): a failure that comes longer than this after the
#: endpoint's previous one starts a new streak, since it was not tried in between.
STREAK_GAP = timedelta(hours=25)
#: What a lease adds to the longest a request may take: the build and the bookkeeping.
LEASE_MARGIN = 60
#: Seconds a run claims new deliveries for: half RQ's job timeout, so that a run of slow
#: receivers (15 s each) hands over to the next run instead of being killed mid-request.
RUN_BUDGET = queue.JOB_TIMEOUT / 2


def _senders() -> dict[str, Sender]:
    found: dict[str, Sender] = {EndpointKind.WEBHOOK: webhook.send,
                                EndpointKind.PUSH: push.send_push}
    try:
        chat = importlib.import_module(f"{__package__}.chat")
    except ModuleNotFoundError:
        return found
    if hasattr(chat, "send_chat"):
        found[EndpointKind.CHAT] = chat.send_chat
    return found


#: The sender of each endpoint kind (see the module's docstring for the contract).
SENDERS: dict[str, Sender] = {}


def sender(kind: str) -> Sender | None:
    if not SENDERS:
        SENDERS.update(_senders())
    return SENDERS.get(kind)


# -- claiming ------------------------------------------------------------------------------

#: The due delivery a claim takes: the oldest of an owner who has not had her turn in this
#: round nor spent her share of the run, at an endpoint that has not failed in this run.
#: Only the delivery is locked, not its endpoint, which its owner may be editing. The claim
#: counts the attempt and sets the lease's end, so the attempt is counted before any
#: request is made.
CLAIM = workqueue.Claim(
    table="wikinotify_deliveries",
    alias="d",
    join="JOIN wikinotify_endpoints e ON e.id = d.endpoint_id",
    free=f"{sql_in('d.state', DELIVERY_NOT_SENT)} AND d.next_attempt_at <= {{now}}",
    narrow="COALESCE(e.owner_id, :site) NOT IN :owners_out"
           " AND d.endpoint_id NOT IN :endpoints_out",
    order_by="d.next_attempt_at, d.id",
    limit="1",
    take=f"state = '{DeliveryState.SENDING}', attempts = attempts + 1,"
         " next_attempt_at = {now+:lease},"
         " updated_at = {now}",
    returning="id, attempts",
    expanding=(("owners_out", sa.String()), ("endpoints_out", sa.BigInteger())),
)


def claim(session: Session, lease: timedelta, *, owners_out: Collection[str] = (),
          endpoints_out: Collection[int] = ()) -> tuple[int, int] | None:
    """Take the most overdue delivery (a lapsed lease included) for ``lease`` from now on
    the database's clock, counting its attempt; ``(id, attempts)``, or ``None`` when none
    is due. Deliveries of the owners in ``owners_out`` (keys as
    :func:`.endpoints.owner_key` gives them) and of the endpoints in ``endpoints_out`` are
    left for later. Committed at once, so the attempt is counted before any request is
    made."""
    row = session.execute(CLAIM.statement(session), {
        "lease": lease.total_seconds(), "site": SITE, "owners_out": list(owners_out),
        "endpoints_out": list(endpoints_out)}).first()
    session.commit()
    return (int(row[0]), int(row[1])) if row is not None else None


#: A delivery an administrator may retry: failed, and not a verification (its challenge
#: may be superseded; its owner asks for a new one).
RETRYABLE = (Delivery.state == DeliveryState.FAILED, Delivery.type != verification.TYPE)


def retry_failed(session: Session, delivery_id: int) -> Delivery | None:
    """An administrator's retry of the failed delivery ``delivery_id``: due again at once,
    on the database's clock, with its attempts back and its last answer cleared, as if
    never tried; its ``webhook-id`` is kept, so a receiver that did take it drops the
    repeat. ``None`` if no failed delivery has this id. Nothing is committed: the caller
    audits, then commits."""
    revived = session.execute(
        sa.update(Delivery)
        .where(Delivery.id == delivery_id, *RETRYABLE)
        .values(state=DeliveryState.PENDING, attempts=0,
                next_attempt_at=sa.text(dialects.now_sql(session)), response_code=None,
                latency_ms=None, error_class=None, error=None, updated_at=utcnow())
    )
    if not dialects.rowcount(revived):
        return None
    return session.get(Delivery, delivery_id, populate_existing=True)


def waiting(session: Session) -> bool:
    """Whether a delivery is due now (the job runs again at once if so)."""
    return CLAIM.waiting(session)


# -- one run -------------------------------------------------------------------------------


@dataclass
class RunReport:
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    blocked: int = 0
    ineligible: int = 0
    disabled: int = 0
    started_at: datetime = field(default_factory=utcnow)
    #: Each attempt's outcome, by channel (the endpoint's kind) and the state it left
    #: the delivery in (``pending``: to be tried again).
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The deliveries made, and those whose attempt failed: the ids an operator looks
    #: for in the run's log line.
    delivered_ids: list[int] = field(default_factory=list)
    failed_ids: list[int] = field(default_factory=list)


@dataclass
class Turns:
    """Whose deliveries a run may take next, so that one owner's slow or hanging receivers
    delay her own deliveries, not other people's.

    The run goes in rounds: in each, every owner with something due has one delivery
    sent, her oldest, the owners taken oldest first; the round ends when nobody who has
    not had her turn has anything due. An endpoint whose request failed in a way that is
    tried again (a timeout, a refused connection, a 5xx, a 429) is tried no more in this
    run: its other deliveries would most likely fail the same way, each after as long.
    And once an owner's requests have taken ``share`` seconds of the run, her other
    deliveries wait for the next run, which starts with everybody's turn again."""

    share: float
    #: The owners who have had their turn in this round.
    served: set[str] = field(default_factory=set)
    #: Seconds each owner's requests have taken in this run.
    spent: dict[str, float] = field(default_factory=dict)
    #: The endpoints that failed in this run.
    failed: set[int] = field(default_factory=set)

    def owners_out(self) -> set[str]:
        over = {owner for owner, seconds in self.spent.items() if seconds >= self.share}
        return self.served | over

    def next_round(self) -> bool:
        """Start a new round; ``False`` when this one gave nobody a turn (nothing that
        is still allowed is due)."""
        if not self.served:
            return False
        self.served.clear()
        return True

    def took(self, endpoint: Endpoint, outcome: Outcome, seconds: float) -> None:
        """Count a request to ``endpoint`` that came to ``outcome`` in ``seconds``."""
        owner = owner_key(endpoint.owner_id)
        self.spent[owner] = self.spent.get(owner, 0.0) + seconds
        if outcome.error_class in RETRIED:
            self.failed.add(endpoint.id)


@dataclass
class Run:
    session: Session
    host: Host
    registry: Registry
    #: Seconds a request may take in all; the lease covers it and :data:`LEASE_MARGIN`.
    timeout: float = 15
    #: Seconds after which the run claims nothing more (what is due waits for the next).
    budget: float = RUN_BUDGET
    #: Seconds of the run one owner's requests may take (``WIKINOTIFY_DELIVERY_SHARE``).
    share: float = DEFAULT_CONFIG["WIKINOTIFY_DELIVERY_SHARE"]
    report: RunReport = field(default_factory=RunReport)
    turns: Turns = field(init=False)

    def __post_init__(self) -> None:
        self.turns = Turns(self.share)

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.timeout + LEASE_MARGIN)

    def run(self, limit: int) -> RunReport:
        self.session.commit()  # each claim begins a transaction of its own (its now())
        deadline = time.monotonic() + self.budget
        taken = 0
        while taken < limit and time.monotonic() < deadline:
            claimed = claim(self.session, self.lease, owners_out=self.turns.owners_out(),
                            endpoints_out=self.turns.failed)
            if claimed is None:
                if self.turns.next_round():
                    continue
                break
            taken += 1
            self.one(*claimed)
        return self.report

    def one(self, delivery_id: int, attempt: int) -> None:
        session = self.session
        delivery = session.get(Delivery, delivery_id)
        endpoint = session.get(Endpoint, delivery.endpoint_id) if delivery else None
        if delivery is None or endpoint is None:
            # Its endpoint was deleted since the claim (the deliveries go with it).
            session.rollback()
            return
        self.turns.served.add(owner_key(endpoint.owner_id))
        if attempt > RETRY.attempts:
            # Claimed again and again by runs that died on it: give it up, or it would
            # come first in every run and stop each one.
            self._settle(delivery, attempt, endpoint, Outcome(
                error_class=PERMANENT, error=f"given up after {RETRY.attempts} attempts"))
            return
        try:
            built = payloads.build(session, self.host, self.registry, endpoint, delivery)
        except sa.exc.SQLAlchemyError:
            raise  # the database, not this delivery: the job fails and the lease hands it on
        except Exception as error:  # one delivery the wiki cannot present stops no run
            log.exception("wikinotify: delivery %s could not be built", delivery_id)
            session.rollback()
            self._settle(delivery, attempt, endpoint, Outcome(
                error_class=PERMANENT, error=f"could not be built: {type(error).__name__}"))
            return
        if isinstance(built, payloads.Ineligible):
            self._settle(delivery, attempt, endpoint, Outcome(error_class=INELIGIBLE,
                                                              error=built.reason))
            return
        send = sender(endpoint.kind)
        if send is None:
            self._settle(delivery, attempt, endpoint, Outcome(
                error_class=PERMANENT, error=f"no sender for {endpoint.kind} is installed"))
            return
        # Detached and committed: the request is made with no transaction open, and the
        # rows need no reload afterwards.
        session.expunge(delivery)
        session.expunge(endpoint)
        session.commit()
        started = time.monotonic()
        try:
            outcome = send(endpoint, delivery, built)
        except Exception as error:  # a sender's bug must not stop the run, nor loop
            log.exception("wikinotify: the %s sender failed", endpoint.kind)
            outcome = Outcome(error_class=PERMANENT, error=f"{type(error).__name__}")
        self.turns.took(endpoint, outcome, time.monotonic() - started)
        if delivery.type == verification.TYPE:
            outcome = verification.judge(delivery, outcome)
        self._settle(delivery, attempt, endpoint, outcome)

    def _settle(self, delivery: Delivery, attempt: int, endpoint: Endpoint,
                outcome: Outcome) -> None:
        """Write what the attempt came to, and what it means for the endpoint."""
        session = self.session
        state, later = self._state_for(outcome, attempt)
        now = utcnow()
        values: dict[str, Any] = {
            "state": state,
            "response_code": outcome.status,
            "latency_ms": outcome.latency_ms,
            "error_class": outcome.error_class,
            "error": RETRY.error(outcome.error),
            "next_attempt_at": later,
            "updated_at": now,
        }
        if state == DELIVERED:
            values["delivered_at"] = now
        # Only this attempt's own row: a lease that lapsed meanwhile handed it on.
        written = session.execute(
            sa.update(Delivery)
            .where(Delivery.id == delivery.id, Delivery.state == DeliveryState.SENDING,
                   Delivery.attempts == attempt)
            .values(**values)
        )
        if dialects.rowcount(written):
            self._count(state, endpoint.kind, delivery.id)
            self._endpoint_after(endpoint.id, delivery, attempt, outcome, now)
        session.commit()

    def _state_for(self, outcome: Outcome, attempt: int) -> tuple[str, datetime | None]:
        if outcome.delivered:
            return DELIVERED, None
        if outcome.error_class in (BLOCKED, INELIGIBLE):
            return outcome.error_class, None
        wait = RETRY.retry_in(attempt) if outcome.error_class in RETRIED else None
        if wait is None:
            return DeliveryState.FAILED, None
        if outcome.retry_after is not None:
            wait = timedelta(seconds=outcome.retry_after)
        return DeliveryState.PENDING, utcnow() + wait

    def _count(self, state: str, channel: str, delivery_id: int) -> None:
        report = self.report
        by_state = report.outcomes.setdefault(channel, {})
        by_state[state] = by_state.get(state, 0) + 1
        (report.delivered_ids if state == DELIVERED else report.failed_ids).append(delivery_id)
        if state == DELIVERED:
            report.delivered += 1
        elif state == DeliveryState.PENDING:
            report.retried += 1
        elif state == BLOCKED:
            report.blocked += 1
        elif state == INELIGIBLE:
            report.ineligible += 1
        else:
            report.failed += 1

    def _endpoint_after(self, endpoint_id: int, delivery: Delivery, attempt: int,
                        outcome: Outcome, now: datetime) -> None:
        """A success ends the endpoint's failing streak (and a verification's echo
        activates it); a failure starts one or extends it, and one that has lasted
        :data:`FAILING_FOR`, or a 410, disables the endpoint.

        A streak is failures with no success between them and no gap longer than
        :data:`STREAK_GAP`: retries keep it going (and a delivery given up is one more
        failure), but an endpoint nothing was sent to for days did not fail all that
        time, so an old failure and a blip after idle days do not disable it."""
        endpoint = self.session.get(Endpoint, endpoint_id)
        if endpoint is None or outcome.error_class == INELIGIBLE:
            return
        if outcome.delivered:
            endpoint.failing_since = None
            if endpoint.kind == EndpointKind.PUSH:
                push_subscriptions.used(self.session, endpoint.id, now)
            if delivery.type == verification.TYPE and verification.activate(endpoint, now):
                endpoints.audit(self.host, endpoints.UPDATED, endpoint, actor_id=None,
                                fields=["verified"])
            return
        if outcome.error_class == GONE and endpoint.kind == EndpointKind.PUSH:
            # The browser's subscription ended (it unsubscribed, or the service dropped
            # it): it is removed, as its owner would, and nothing more is sent to it.
            push_subscriptions.remove(self.session, endpoint)
            log.info("wikinotify: push subscription %s removed: %s", endpoint.id,
                     outcome.error)
            return
        if outcome.error_class == GONE:
            self._disable(endpoint, endpoint_disabled.GONE)
            return
        if endpoint.failing_since is None or (
            attempt == 1 and not self._failed_lately(endpoint_id, delivery.id, now)
        ):
            endpoint.failing_since = now
        elif (now - endpoint.failing_since >= FAILING_FOR
              and endpoint.state != EndpointState.DISABLED):
            self._disable(endpoint, endpoint_disabled.FAILING)

    def _failed_lately(self, endpoint_id: int, delivery_id: int, now: datetime) -> bool:
        """Whether another delivery of the endpoint failed within :data:`STREAK_GAP` (a
        retried one's row keeps its last failure's time; a later attempt of this very
        delivery follows its previous one by less than the gap, by the back-off)."""
        last = self.session.scalar(
            sa.select(sa.func.max(Delivery.updated_at)).where(
                Delivery.endpoint_id == endpoint_id, Delivery.id != delivery_id,
                Delivery.state.in_(
                    (*DELIVERY_NOT_SENT, DeliveryState.FAILED, DeliveryState.BLOCKED)),
                Delivery.error_class.is_not(None), Delivery.error_class != INELIGIBLE,
            )
        )
        return last is not None and now - last <= STREAK_GAP

    def _disable(self, endpoint: Endpoint, msgid: str) -> None:
        """Disable ``endpoint``, cancel what waits for it, tell its owner and audit it (by
        no one); the reason is kept in English on the row and in the audit record (the
        owner's notice says it in her language)."""
        reason = msgid[0].upper() + msgid[1:]
        endpoint.state = EndpointState.DISABLED
        endpoint.disabled_reason = reason
        self.session.execute(
            sa.update(Delivery)
            .where(Delivery.endpoint_id == endpoint.id, Delivery.state == DeliveryState.PENDING)
            .values(state=DeliveryState.CANCELLED, next_attempt_at=None, updated_at=utcnow())
        )
        notices.endpoint_disabled_notice(self.session, endpoint, msgid)
        endpoints.audit(self.host, endpoints.UPDATED, endpoint, actor_id=None,
                        fields=["enabled"], reason=reason)
        self.report.disabled += 1
        log.warning("wikinotify: endpoint %s disabled: %s", endpoint.id, reason)


def run(app: Flask, session: Session, host: Host, registry: Registry,
        report: RunReport | None = None) -> RunReport:
    """One bounded delivery run with the app's settings, counted in ``report`` (the
    caller's, which it may read however the run ends) or a new one."""
    timeout = config("OUTBOUND_TIMEOUT", app) + config("OUTBOUND_CONNECT_TIMEOUT", app)
    started = time.monotonic()
    report = Run(session, host, registry, timeout=timeout,
                 share=config("DELIVERY_SHARE", app),
                 report=report or RunReport()).run(config("DELIVERY_BATCH", app))
    log.info("wikinotify: delivery run took %.1f s", time.monotonic() - started)
    return report


def kick(app: Flask) -> bool:
    """Ask for a delivery run (debounced like the fan-out's kick; never raises)."""
    return queue.kick(app, queue.Job.DELIVER)
