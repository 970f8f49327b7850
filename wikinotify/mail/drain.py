"""The mail drain (docs/rules.md#the-mail-run): one mail per (user, site) per run, never a
transaction open across SMTP.

A (user, site)'s due rows are claimed (:mod:`wikinotify.mail.claim`) by moving them to
``sending``, whose ``email_after`` becomes a lease. The mail is built, the claim is
committed, the mail is handed to the SMTP server, and only then are the rows marked
``sent``: with the next claim (on PostgreSQL in its very statement), so that each mail
costs one statement; or alone at the end of a chunk or of the run, or when anything goes
wrong. A worker killed between the handoff and
that commit leaves its rows ``sending``; when the lease lapses another run takes them and
the mail goes out again. That is the one way a mail is sent twice, and only ever the one
mail in flight: delivery is at-least-once.

The relay is talked to in a thread of its own (:mod:`wikinotify.mail.sender`): while it
takes one mail, the run claims and builds the next; it waits for the relay's answer, and
commits the mark, before it hands that one over. A run that stops (the relay is the
trouble) or fails gives the rows of the mail it built but did not hand over back to
pending (:meth:`Drain._release`).

The lease is counted from each claim on the database's clock, so a long run (a slow
relay) never claims rows whose lease has already lapsed, and workers whose clocks
disagree agree on it. The claim returns the rows themselves, as the table's rows, and
the run writes them with statements of its own, on the one connection it holds
(:class:`.held.HeldConnection`), where on PostgreSQL each statement is its own transaction.
What is the same for many mails (the settings, the sites and their switches) is read
once per run, and the readers' email preferences, recent mails, schedules (their zone)
and whether they mute anything once per :data:`CHUNK` of them, just before their mails;
the entries of a reader who mutes something are re-checked against her mutes at once (a
mute made meanwhile cancels the mail still pending itself, docs/rules.md#mutes).
What the wiki says of a page, and of a group set's access to it, is asked once per run
(:class:`.lookups.RunLookups`): the check at send time (docs/rules.md#access) is kept, made
once for every mail of the run about that page to readers of those groups. The hourly
limit is :mod:`wikinotify.mail.hourly`'s.

A failure to build or send one mail is recorded on that mail's rows with its class
(:mod:`wikinotify.mail.relay`; :func:`.claim.record`) and never stops the run, unless the
relay itself is the trouble.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from flask import current_app
from sqlalchemy.orm import Session

from .. import dialects
from ..announcements import withdrawn_entries
from ..categories import Registry
from ..host import Host, SiteFacts, UserFacts
from ..inbox.presentation import Presented
from ..instance_settings import instance_settings, site_enabled
from ..models import Channel, EmailState, NotificationRow, Preference, SkipReason, utcnow
from ..preferences import effective, mutes
from ..preferences.cadence import Schedule, zone_for
from ..preferences.grid import schedule_of, schedules
from . import claim, compose, relay
from .claim import Pair, Sent, mail_waiting, skip_pending
from .held import HeldConnection
from .hourly import mails_allowed_from, recent_mails
from .lookups import RunLookups
from .sender import Sender
from .tokens import make_token

# What the jobs and the unsubscribe page ask of the drain, wherever it now lives.
__all__ = ["Drain", "DrainReport", "Pair", "mail_waiting", "skip_pending"]

log = logging.getLogger(__name__)

#: The sentence a row whose mail was dropped at send time keeps (``email_error``), by why.
SKIPPED_BECAUSE = {
    SkipReason.ACCOUNT: "the account can no longer receive mail",
    SkipReason.SITE_OFF: "notifications are off on this site",
    SkipReason.PREFERENCE: "email is off for this category",
    SkipReason.NOT_VISIBLE: "the reader can no longer see this page",
    SkipReason.MUTED: "the reader muted this page or person",
}
#: Why a row about a page its reader can no longer see was not mailed.
NO_LONGER_VISIBLE = SKIPPED_BECAUSE[SkipReason.NOT_VISIBLE]

#: Readers whose email preferences, recent mails, mutes and schedules are read together,
#: just before their mails: few enough that a change made meanwhile is seen within
#: seconds, and one query each instead of one a mail (a mute's and a zone's per mail
#: had cost two of a mail's four statements).
CHUNK = 50


@dataclass
class DrainReport:
    sent: int = 0
    skipped: int = 0
    retried: int = 0
    failed: int = 0
    #: Rows held back because their reader had all the mail an hour allows.
    held: int = 0
    #: Rows put back to pending without an attempt burnt (rate limit, configuration).
    postponed: int = 0
    mails: int = 0
    #: The failure that stopped the run before its batch was done, if one did.
    stopped: relay.Failure | None = None
    started_at: datetime = field(default_factory=utcnow)
    #: Mails that failed (an attempt, whatever became of it), by class.
    failures: dict[str, int] = field(default_factory=dict)
    #: Rows skipped, by :class:`~wikinotify.models.SkipReason`.
    skipped_by: dict[str, int] = field(default_factory=dict)
    #: The rows the relay took, and those whose mail failed: the ids an operator looks
    #: for in the run's log line.
    sent_ids: list[int] = field(default_factory=list)
    failed_ids: list[int] = field(default_factory=list)


#: A mail built and written out, with its rows, to be handed to the relay.
Ready = tuple[list[NotificationRow], compose.NotificationMessage]


def email_choices(session: Session, user_ids: Sequence[str]) -> dict[str, dict[str, bool]]:
    """Each of ``user_ids``' stored email choices: category → enabled."""
    rows = session.execute(
        sa.select(Preference.user_id, Preference.category, Preference.enabled).where(
            Preference.user_id.in_(user_ids), Preference.channel == Channel.EMAIL
        )
    )
    choices: dict[str, dict[str, bool]] = {}
    for user_id, category, enabled in rows:
        choices.setdefault(user_id, {})[category] = enabled
    return choices


def _still_wanted(
    registry: Registry, stored: Mapping[str, bool], entries: Sequence[NotificationRow]
) -> tuple[list[NotificationRow], list[NotificationRow]]:
    """Split on the email preference as it is now (``stored``, read just before): a
    category turned off since the row was written is dropped, not mailed."""
    keep: list[NotificationRow] = []
    drop: list[NotificationRow] = []
    for entry in entries:
        category = registry.get(entry.category)
        mine: dict[str, bool] = (
            {Channel.EMAIL: stored[entry.category]} if entry.category in stored else {})
        # The one rule; mail is on, or no drain would run (jobs/send_mail.py).
        wanted = category is not None and effective(category, mine, mail_on=True).email
        (keep if wanted else drop).append(entry)
    return keep, drop


@dataclass
class Drain:
    session: Session
    host: Host
    registry: Registry
    #: ``WIKINOTIFY_MAIL_HOURLY_LIMIT``: the most mails one person gets in any hour.
    hourly_limit: int = 10
    #: ``WIKINOTIFY_MAIL_LEASE``: how long a claim is its run's, from the claim.
    lease: timedelta = timedelta(minutes=15)
    #: ``WIKINOTIFY_SMTP_TIMEOUT``: seconds the relay has to connect and to answer.
    smtp_timeout: float = 30
    report: DrainReport = field(default_factory=DrainReport)
    #: Read once per run: what every mail of the run shares.
    _secret: bytes = b""
    _switches: dict[str | None, bool] = field(default_factory=dict)
    #: Read once per chunk of readers, just before their mails: their email choices,
    #: recent mails, their schedules. (Not their mutes: a mute is asked after the claim of
    #: each mail, so one made since the chunk was read still keeps the mail back.)
    _choices: dict[str, dict[str, bool]] = field(default_factory=dict)
    _recent: dict[str, set[datetime]] = field(default_factory=dict)
    _schedules: dict[str, Schedule] = field(default_factory=dict)
    #: The host's answers about sites, pages and access, asked once per run.
    _lookups: RunLookups = field(init=False)
    #: The connection the run holds, while it runs.
    _held: HeldConnection | None = None
    #: The mail with the relay: its rows and when it was handed over.
    _in_flight: Sent | None = None
    #: The mail built last, claimed and written out, until it is handed over.
    _ready: Ready | None = None
    #: The rows claimed for the mail being built.
    _claimed: list[int] | None = None
    #: The mail the relay took last, with its time, whose ``sent`` mark waits for the
    #: next transaction; then the one whose mark that transaction holds, uncommitted.
    _unmarked: Sent | None = None
    _marking: Sent | None = None

    def __post_init__(self) -> None:
        self._lookups = RunLookups(self.host)

    def run(
        self,
        limit: int,
        pairs: Sequence[Pair] | None = None,
        share: Callable[[list[Pair]], list[Pair]] | None = None,
    ) -> DrainReport:
        """Mail up to ``limit`` (user, site) pairs, the oldest due; or exactly ``pairs``
        (a share of another run's batch). ``share`` may hand part of the batch to other
        runs, and returns what this run keeps."""
        if pairs is None:
            pairs = claim.due_pairs(self.session, limit)
            if share is not None:
                pairs = share(pairs)
        users = self.host.users(sorted({u for u, _ in pairs})) if pairs else {}
        # Asked only for the readers of instance-scoped mail, and for all of them at once.
        readers = sorted({u for u, site_id in pairs if site_id is None})
        self._lookups = RunLookups(self.host,
                                   self.host.last_site_id(readers) if readers else {})
        self._secret = instance_settings(self.session).unsubscribe_secret
        # Flask types its proxy as the app itself, so the proxy's method is unknown to mypy.
        sender = Sender(current_app._get_current_object(),  # type: ignore[attr-defined]
                        self.smtp_timeout)
        self.session.commit()  # the run's transactions begin on its connection
        held = self._held = HeldConnection(self.session, dialects.is_postgresql(self.session))
        try:
            for first in range(0, len(pairs), CHUNK):
                chunk = pairs[first : first + CHUNK]
                chunk_users = sorted({u for u, _ in chunk})
                if not self._conclude(sender):  # before the last hour's mails are read
                    return self.report
                self._choices = email_choices(self.session, chunk_users)
                self._recent = recent_mails(self.session, chunk_users, utcnow())
                self._schedules = schedules(self.session, chunk_users)
                self._commit()
                self._hand_over(sender)  # counted in this chunk's hour
                for user_id, site_id in chunk:
                    self._collect(sender)
                    if self.report.stopped is not None:
                        return self.report  # the relay is the trouble: the rest waits
                    # The mail the relay took is marked in the claim's very statement,
                    # before the next mail goes; the claim is still its transaction's
                    # first, its now() the lease's start.
                    entries = claim.claim(self.session, user_id, site_id, self.lease,
                                          last=self._unmarked, held=held)
                    self._marking, self._unmarked = self._unmarked, None
                    # Given back if the run ends before their mail is built (a hand-over
                    # the sending thread refuses included), not left to the lease.
                    self._claimed = [e.id for e in entries]
                    self._commit()
                    self._hand_over(sender)
                    if entries:
                        # Built while the relay takes the mail before it.
                        self._ready = self._guarded(users.get(user_id), user_id, site_id,
                                                    entries)
                    self._claimed = None
            if self._conclude(sender):
                self._hand_over(sender)  # the last mail built
        except sa.exc.SQLAlchemyError:
            self._rollback()  # the job fails (RQ records it), once the last mail is marked
            raise
        finally:
            # Each step of the way out runs whatever the one before raised: a run that
            # failed to give its rows back must still stop its thread, put the switch
            # interval back and return its connection as it came.
            with contextlib.ExitStack() as way_out:
                way_out.callback(held.close)
                way_out.callback(self._end_transaction)
                way_out.callback(setattr, self, "_held", None)
                way_out.callback(sender.close)
                way_out.callback(self._release)
                self._settle_sent(sender)
        return self.report

    def _conclude(self, sender: Sender) -> bool:
        """Wait for the mail with the relay and commit its ``sent`` mark (or record why
        it did not go); whether the run goes on."""
        self._collect(sender)
        self._write_mark()
        self._commit()
        return self.report.stopped is None

    def _hand_over(self, sender: Sender) -> None:
        """Give the relay the mail built last, if one is; the run claims and builds the
        next while the relay takes it. The mail before it is marked ``sent`` already."""
        if self._ready is None:
            return
        entries, message = self._ready
        now = utcnow()
        sender.send(message)
        self._ready, self._in_flight = None, (entries, now)
        # Counted for the hourly limit at once: the reader's next mail (another site's)
        # may be built before this one's answer, and it must see this one.
        self._recent.setdefault(entries[0].user_id, set()).add(now)

    def _collect(self, sender: Sender) -> None:
        """Wait for the relay's answer about the mail in flight: the mark of a mail it
        took waits for the next transaction (:meth:`_write_mark`), a failure is recorded."""
        if self._in_flight is None:
            return
        entries, handed_at = self._in_flight
        # Waited for before the mail is let go: a run interrupted here (a job timeout)
        # still waits for it, and marks it, on its way out.
        error = sender.answer()
        self._in_flight = None
        if error is None:
            self._unmarked = (entries, utcnow())
            self.report.sent += len(entries)
            self.report.mails += 1
            self.report.sent_ids.extend(e.id for e in entries)
            return
        self._recent.get(entries[0].user_id, set()).discard(handed_at)
        self._record([e.id for e in entries], relay.classify(error))
        self._commit()

    def _release(self) -> None:
        """Give back the rows claimed for mails this run will not hand over (it stops,
        or fails, before they go): pending and due, no attempt burnt, as if never
        claimed. A database that fails here leaves them to the lease."""
        ids = [e.id for e in self._ready[0]] if self._ready is not None else []
        ids += self._claimed or []
        self._ready = self._claimed = None
        if not ids:
            return
        try:
            claim.mark(self.session, ids, claimed=True, email_state=EmailState.PENDING,
                  email_after=utcnow())
            self._commit()
        except Exception as error:
            log.warning("wikinotify: claimed rows left to their lease: %s", error)
            self._rollback()

    def _guarded(
        self, user: UserFacts | None, user_id: str, site_id: str | None,
        entries: list[NotificationRow],
    ) -> Ready | None:
        """One (user, site), whose rows the claim just returned: its mail, if one is to
        go. Whatever goes wrong with it is recorded on them and the run goes on. A
        database error is not about this mail: it ends the job (RQ records it), and its
        rows are given back on the way out (:meth:`_release`), or left to the lease."""
        ids = [e.id for e in entries]
        try:
            return self._one(user, user_id, site_id, entries)
        except sa.exc.SQLAlchemyError:
            raise
        except Exception as error:
            log.exception("wikinotify: the mail to user %s could not be sent", user_id)
            # What was decided before the failure stands (on PostgreSQL each statement
            # has committed already): a skipped row stays skipped.
            self._record(ids, relay.classify(error))
            self._commit()
            return None

    def _site_enabled(self, site_id: str | None) -> bool:
        """The site switch, read once per run for each site."""
        if site_id not in self._switches:
            self._switches[site_id] = site_enabled(self.session, site_id)
        return self._switches[site_id]

    def _skip(self, entries: Sequence[NotificationRow], reason: SkipReason) -> None:
        if not entries:
            return
        claim.mark(self.session, [e.id for e in entries], email_state=EmailState.SKIPPED,
                   email_error=SKIPPED_BECAUSE[reason])
        self.report.skipped += len(entries)
        by = self.report.skipped_by
        by[reason] = by.get(reason, 0) + len(entries)

    def _one(
        self, user: UserFacts | None, user_id: str, site_id: str | None,
        entries: list[NotificationRow],
    ) -> Ready | None:
        site = self._lookups.site_for(user_id, site_id)
        recent = self._recent.setdefault(user_id, set())
        ready = None
        if user is None or not user.can_receive_email:
            self._skip(entries, SkipReason.ACCOUNT)
        elif site is None or not self._site_enabled(site_id):
            self._skip(entries, SkipReason.SITE_OFF)
        elif (allowed := mails_allowed_from(recent, utcnow(), self.hourly_limit)):
            self._hold(entries, allowed)
        else:
            keep, drop = _still_wanted(self.registry, self._choices.get(user_id, {}), entries)
            self._skip(drop, SkipReason.PREFERENCE)
            # Re-checked against her mutes as they are now, if her claim found she has any:
            # a mute made since the run began (an undo that made the mail pending again
            # after the mute's cancel) keeps it back too.
            muted = (mutes.muted_entries(self.session, user_id, [e.id for e in keep])
                     if claim.mutes_anything(keep) else set())
            self._skip([e for e in keep if e.id in muted], SkipReason.MUTED)
            keep = [e for e in keep if e.id not in muted]
            # A withdrawn announcement's, written by a fan-out running as it was withdrawn.
            gone = withdrawn_entries(self.session, keep)
            self._skip([e for e in keep if e.id in gone], SkipReason.NOT_VISIBLE)
            keep = [e for e in keep if e.id not in gone]
            if keep:
                ready = self._mail(user, site, keep)
        # No transaction stays open while the SMTP server takes its time: this commit is
        # the claim's.
        self._commit()
        return ready

    def _hold(self, entries: Sequence[NotificationRow], until: datetime) -> None:
        """Back to ``pending`` until the hour allows another mail: whatever else falls
        due meanwhile waits with them, so it all goes as one digest then."""
        claim.mark(self.session, [e.id for e in entries], claimed=True,
                   email_state=EmailState.PENDING, email_after=until)
        self.report.held += len(entries)

    def _visible(
        self, user: UserFacts, site: SiteFacts, entries: Sequence[NotificationRow]
    ) -> list[Presented]:
        """The entries ``user`` may still see, presented; the others are dropped with
        the reason recorded (access is checked again at send time, docs/rules.md#access)."""
        presented = compose.presented_for(user, site, entries, host=self._lookups.as_host(),
                                         registry=self.registry)
        self._skip([p.entry for p in presented if not p.available], SkipReason.NOT_VISIBLE)
        return [p for p in presented if p.available]

    def _mail(
        self, user: UserFacts, site: SiteFacts, entries: Sequence[NotificationRow]
    ) -> Ready | None:
        """The mail of ``entries`` that ``user`` may still see, written out; ``None`` if
        none is left, or the mail cannot be built (recorded on the rows)."""
        visible = self._visible(user, site, entries)
        if not visible:
            return None
        entries = [p.entry for p in visible]
        shown = visible[: compose.SHOWN]
        token = make_token(self._secret, user.id, [e.category for e in entries])
        try:
            message = compose.build(
                user=user,
                site=site,
                entries=shown,
                unshown=visible[len(shown):],
                registry=self.registry,
                token=token,
                zone=zone_for(schedule_of(self._schedules, user.id), user, site.timezone),
                secret=self._secret,
            )
            message.freeze()
        except sa.exc.SQLAlchemyError:
            raise
        except Exception as error:
            self._record([e.id for e in entries], relay.classify(error))
            return None
        return entries, message

    def _write_mark(self) -> None:
        """Write the ``sent`` mark of the mail the relay took last in this transaction."""
        if self._unmarked is not None:
            claim.sent(self.session, *self._unmarked)
            self._marking, self._unmarked = self._unmarked, None

    def _commit(self) -> None:
        # In autocommit each statement committed already: the session's commit would
        # only close its bookkeeping, to open it again at the next statement, a twentieth
        # of a digest's cost twice a mail. It is closed once, when the run ends.
        if self._held is None or not self._held.autocommit:
            self.session.commit()
        self._marking = None

    def _end_transaction(self) -> None:
        """Close the session's transaction before the run's connection goes back."""
        try:
            self.session.commit()
        except sa.exc.SQLAlchemyError:
            self.session.rollback()

    def _rollback(self) -> None:
        """Roll back; the ``sent`` mark the transaction held waits for the next."""
        self.session.rollback()
        if self._marking is not None:
            self._unmarked, self._marking = self._marking, None

    def _settle_sent(self, sender: Sender) -> None:
        """Wait for the mail with the relay and mark it ``sent``, in a transaction of its
        own (the run ends). A connection the database dropped here would have the mail
        sent again when the lease lapses, so the mark is tried once more, on a fresh
        connection."""
        self._collect(sender)
        for retry in (False, True):
            if self._marking is None and self._unmarked is None:
                return
            try:
                self._write_mark()
                self._commit()
                return
            except sa.exc.DBAPIError as error:
                self._rollback()
                if retry or not error.connection_invalidated:
                    raise
                log.warning("wikinotify: the database dropped the connection; marking again")

    def _record(self, ids: Sequence[int], failure: relay.Failure) -> None:
        """What ``failure`` makes of the mail's rows (:func:`.claim.record`), counted."""
        if failure.stops_run:
            self.report.stopped = failure
        counted = claim.record(self.session, ids, failure)
        setattr(self.report, counted, getattr(self.report, counted) + len(ids))
        self.report.failures[failure.kind] = self.report.failures.get(failure.kind, 0) + 1
        self.report.failed_ids.extend(ids)
