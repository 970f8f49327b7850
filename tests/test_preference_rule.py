"""The effective preference is one rule, :func:`wikinotify.preferences.effective`, and
every path that decides a channel asks it: the preferences API, the fan-out, the mail
drain and the webhook, chat and push deliveries. For every combination of stored rows (none,
on, off on each channel), the category's defaults and the mail switch, the four paths
give what the rule gives, and the rule gives what the preferences' docs say
(docs/rules.md#preferences-are-stored-only-where-they-differ,
docs/rules.md#the-launch-categories)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from flask import Flask
from flask_mail import Mail
from sqlalchemy.orm import Session

from wikinotify import preferences
from wikinotify.categories import Category, Channels
from wikinotify.host import UserFacts
from wikinotify.mail import drain
from wikinotify.mail.setup import mail_configured
from wikinotify.models import Base, Endpoint, Preference
from wikinotify.outbound import payloads
from wikinotify.pipeline import audience

READER = "reader"
CHANNELS = ("inApp", "email", "webhook", "chat", "push")
OUTBOUND = ("webhook", "chat", "push")
#: A channel's stored row: none, on, off.
STORED = (None, True, False)


def category(in_app: bool, email: bool) -> Category:
    return Category(
        key="ruleTest", events=frozenset({"page:edit"}), section="everything",
        title="Rule test", description="The preference rule's own category.",
        defaults=Channels(in_app, email), priority=1,
        recipients=lambda ctx, event, after, limit: [],
        group_key=lambda event: "ruleTest", told_to_anyone=False,
    )


@pytest.fixture(scope="module")
def session():
    engine = sa.create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        # One webhook, one chat endpoint and one push subscription of the reader's take
        # the category: the fan-out then answers for every outbound channel.
        session.add_all([
            Endpoint(kind=kind, owner_id=READER, categories=["ruleTest"], state="active")
            for kind in OUTBOUND
        ])
        session.commit()
        yield session
    engine.dispose()


def switch_app(mail_on: bool) -> Flask:
    """An app whose mail switch is ``mail_on``: every path reads the switch through
    :func:`mail_configured`, as the dispatch job, the API and the mail job do."""
    app = Flask(__name__)
    app.config.update(WIKINOTIFY_MAIL_ENABLED=mail_on, MAIL_DEFAULT_SENDER="wiki@localhost")
    Mail(app)
    return app


def store(session: Session, rows: dict[str, bool | None]) -> None:
    session.execute(sa.delete(Preference))
    for channel, enabled in rows.items():
        if enabled is not None:
            preferences.grid._store(session, READER, "ruleTest", channel, enabled, not enabled)
    session.commit()


def documented(cat: Category, rows: dict[str, bool | None], mail_on: bool) -> dict[str, bool]:
    """The rule as the docs state it: the stored row, else the category's default (webhook,
    chat and push follow its email default); no email while mail is off."""
    default = {"inApp": cat.defaults.in_app, "email": cat.defaults.email,
               **dict.fromkeys(OUTBOUND, cat.defaults.email)}
    got = {c: default[c] if rows[c] is None else bool(rows[c]) for c in CHANNELS}
    got["email"] = got["email"] and mail_on
    return got


def through_the_api(session: Session, cat: Category, mail_on: bool) -> dict[str, bool]:
    """``GET /api/preferences``' columns (:class:`preferences.Overview`)."""
    shown = preferences.overview(session, [cat], READER, mail_on=mail_on, site_on=True,
                                 outbound=OUTBOUND)
    return shown.shown(shown.choices[0].effective)


def through_the_fan_out(session: Session, cat: Category, mail_on: bool) -> dict[str, bool]:
    """:func:`wikinotify.pipeline.audience.decide` for the reader: the channels of her
    entry and the endpoints that get a delivery."""
    run = SimpleNamespace(
        event=SimpleNamespace(actor_id=None, page_id=None), session=session, mail_on=mail_on,
        host=SimpleNamespace(users=lambda ids: {
            READER: UserFacts(id=READER, display_name="Reader", email="r@example.org")}),
        access={}, page={},
        # A run of one batch: it read nothing once for itself, so each read is the batch's.
        among=lambda name, ids, read: read(ids),
    )
    chosen = audience.decide(run, cat, [READER])
    if not chosen:
        return dict.fromkeys(CHANNELS, False)
    kinds = {session.get(Endpoint, e).kind for e in chosen[0].endpoints}
    told = chosen[0].channels
    return {"inApp": told.in_app, "email": told.email,
            **{kind: kind in kinds for kind in OUTBOUND}}


def through_the_drain(session: Session, cat: Category, app: Flask) -> bool:
    """Whether the mail drain sends the entry: no drain runs while mail is off
    (``jobs/send_mail._drain``), and one that runs drops what the reader turned off."""
    if not mail_configured(app):
        return False
    entry = SimpleNamespace(category=cat.key)
    stored = drain.email_choices(session, [READER]).get(READER, {})
    keep, _ = drain._still_wanted({cat.key: cat}, stored, [entry])
    return keep == [entry]


def through_the_deliveries(session: Session, cat: Category, kind: str) -> bool:
    """Whether a webhook or chat delivery of the entry may go (:mod:`outbound.payloads`)."""
    return payloads._wanted(session, READER, cat, kind)


@pytest.mark.parametrize(("in_app", "email", "mail_on"),
                         list(itertools.product((True, False), repeat=3)))
def test_the_four_former_paths_agree_with_the_one_rule(session, in_app, email, mail_on):
    cat = category(in_app, email)
    app = switch_app(mail_on)
    with app.app_context():
        switch = mail_configured(app)
        # Every combination of the first four channels; push, the same rule as chat's,
        # takes each of its three values in turn beside them (3^5 cases would triple the
        # time for no path of its own).
        combinations = itertools.product(STORED, repeat=len(CHANNELS) - 1)
        for number, stored in enumerate(combinations):
            rows = dict(zip(CHANNELS, (*stored, STORED[number % 3]), strict=True))
            store(session, rows)
            expected = documented(cat, rows, mail_on)
            rule = preferences.effective(cat, {c: v for c, v in rows.items() if v is not None},
                                         mail_on=switch)
            assert dict(zip(CHANNELS, rule, strict=True)) == expected, rows
            assert through_the_api(session, cat, switch) == expected, rows
            assert through_the_fan_out(session, cat, switch) == expected, rows
            assert through_the_drain(session, cat, app) == expected["email"], rows
            for kind in OUTBOUND:
                assert through_the_deliveries(session, cat, kind) == expected[kind], rows
