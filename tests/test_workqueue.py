"""The work-queue machine (wikinotify.workqueue): the retry policy as data, each use's
numbers, and the claim's text on both databases (the claim query trap handled once)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from wikinotify import workqueue
from wikinotify.mail import claim as mail_claim
from wikinotify.outbound import engine


def session_of(dialect: str):
    """What the claim asks of a session: its database's name."""
    bind = SimpleNamespace(dialect=SimpleNamespace(name=dialect))
    return SimpleNamespace(get_bind=lambda: bind)


def test_a_policy_waits_by_its_table_then_gives_up():
    policy = workqueue.RetryPolicy(attempts=4, waits=(timedelta(minutes=1),
                                                      timedelta(minutes=5)))
    assert [policy.retry_in(n) for n in (1, 2, 3, 4, 5)] == [
        timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=5), None, None]


def test_jitter_stretches_or_shrinks_by_at_most_its_fraction():
    policy = workqueue.RetryPolicy(attempts=3, waits=(timedelta(seconds=100),), jitter=0.2)
    assert policy.wait(1, rng=lambda: 0.0) == timedelta(seconds=80)
    assert policy.wait(1, rng=lambda: 0.5) == timedelta(seconds=100)
    assert policy.wait(1, rng=lambda: 1.0) == timedelta(seconds=120)


def test_an_error_is_kept_to_the_policys_length():
    policy = workqueue.RetryPolicy(attempts=1, waits=(), error_length=5)
    assert policy.error("abcdefgh") == "abcde"
    assert policy.error("") is None and policy.error(None) is None


def test_each_use_keeps_its_numbers():
    assert (mail_claim.RETRY.attempts, mail_claim.RETRY.waits, mail_claim.RETRY.jitter,
            mail_claim.RETRY.error_length) == (
        3, (timedelta(minutes=1), timedelta(minutes=5)), 0.0, 1000)
    assert (engine.RETRY.attempts, len(engine.RETRY.waits), engine.RETRY.jitter,
            engine.RETRY.error_length) == (8, 7, 0.2, 500)


CLAIM = workqueue.Claim(table="t", free="due <= {now}", narrow="owner {same} :owner",
                        order_by="due, id", limit=":batch",
                        take="state = 'taken', due = {now+:lease}")


def test_on_postgresql_the_choice_is_evaluated_once_and_skips_locked_rows():
    sql = CLAIM.sql(session_of("postgresql"))
    assert "WHERE id = ANY(ARRAY(" in sql and "FOR UPDATE SKIP LOCKED))" in sql
    assert "IN (" not in sql  # the semi-join that re-runs the LIMIT per row
    assert "(due <= now()) AND (owner IS NOT DISTINCT FROM :owner)" in sql
    assert "due = (now() + make_interval(secs => :lease))" in sql
    assert "LIMIT :batch" in sql and "RETURNING id" in sql


def test_on_sqlite_the_conditional_update_is_the_claim():
    sql = CLAIM.sql(session_of("sqlite"))
    assert "WHERE id IN (" in sql and "FOR UPDATE" not in sql
    assert "owner IS :owner" in sql and "{" not in sql


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_a_joined_claim_locks_only_its_own_rows(dialect):
    sql = engine.CLAIM.sql(session_of(dialect))
    assert "SELECT d.id FROM wikinotify_deliveries d JOIN wikinotify_endpoints e" in sql
    assert ("FOR UPDATE OF d SKIP LOCKED" in sql) == (dialect == "postgresql")
