"""``emit`` never shares the host's fate (docs/rules.md#lessons-learned): whatever goes wrong with
the notification, the wiki's own write is kept. Every test runs on SQLite and on PostgreSQL, where a
failed statement would otherwise abort the caller's whole transaction and turn its commit into a
silent rollback."""

from __future__ import annotations

import contextlib

import pytest
import sqlalchemy as sa

from demo.extensions import notify
from demo.models import Page, Revision, db
from tests.helpers.web import login
from tests.helpers.wiki import events, page, user


@contextlib.contextmanager
def events_table_missing():
    """The outbox renamed away, as on a wiki whose migration has not run yet."""
    with db.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE wikinotify_events RENAME TO wikinotify_events_away"))
    try:
        yield
    finally:
        with db.engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE wikinotify_events_away RENAME TO wikinotify_events"))


def revisions_of(path: str) -> list[Revision]:
    db.session.expire_all()
    query = sa.select(Revision).where(Revision.page_id == page(path).id).order_by(Revision.id)
    return list(db.session.scalars(query))


def test_an_edit_is_saved_when_the_events_table_is_missing(ctx, client, caplog):
    before = len(revisions_of("handbook/onboarding"))
    login(client, "bob")
    with events_table_missing():
        response = client.post(
            "/pages/handbook/onboarding/edit",
            data={"title": "Onboarding", "content": "Saved whatever happens"},
            follow_redirects=True,
        )
    assert response.status_code == 200
    assert "Page saved." in response.get_data(as_text=True)
    assert page("handbook/onboarding").content == "Saved whatever happens"
    assert len(revisions_of("handbook/onboarding")) == before + 1
    assert "could not emit page:edit" in caplog.text
    assert events() == []


def _edit_and_emit(**emitted) -> Page:
    """The host's own write (a new revision), then an emit, then the host's commit."""
    target = page("handbook/onboarding")
    target.content = "Edited beside a bad event"
    db.session.add(Revision(page_id=target.id, title=target.title, content=target.content,
                            author_id=user("bob").id))
    db.session.flush()
    fields = {"site_id": target.site_id, "actor_id": user("bob").id, "page_id": target.id,
              "snapshot": {"title": target.title, "path": target.path}, "variant": "edited"}
    notify.emit("page:edit", **{**fields, **emitted})
    db.session.commit()
    return target


@pytest.mark.parametrize(
    ("emitted", "logged"),
    [
        ({"page_id": "p" * 65}, "page_id is 65 characters long; at most 64 fit"),
        ({"actor_id": "a" * 200}, "actor_id is 200 characters long; at most 64 fit"),
        ({"snapshot": {"title": "nul \x00 in the title"}}, "NUL character"),
        ({"snapshot": {"title": object()}}, "not JSON"),
    ],
    ids=["long-page-id", "long-actor-id", "nul-in-json", "not-json"],
)
def test_a_bad_event_is_refused_and_the_edit_is_kept(ctx, caplog, emitted, logged):
    before = len(revisions_of("handbook/onboarding"))
    _edit_and_emit(**emitted)
    assert page("handbook/onboarding").content == "Edited beside a bad event"
    assert len(revisions_of("handbook/onboarding")) == before + 1
    assert events() == []
    assert logged in caplog.text


def test_a_failed_insert_rolls_back_only_its_savepoint(ctx, caplog):
    """The INSERT itself failing (here: no table) costs the host nothing, and the next
    emit in the same transaction still works."""
    before = len(revisions_of("handbook/onboarding"))
    target = page("handbook/onboarding")
    with events_table_missing():
        _edit_and_emit()
        assert "could not emit page:edit" in caplog.text
    assert len(revisions_of("handbook/onboarding")) == before + 1
    notify.emit("page:edit", site_id=target.site_id, actor_id=user("bob").id,
                page_id=target.id, snapshot={"title": "t"}, variant="edited")
    db.session.commit()
    assert len(events()) == 1


def test_emit_as_the_first_statement_still_rolls_back_with_the_caller(ctx):
    """On SQLite a SAVEPOINT opened outside a transaction would be the transaction, and
    its release a commit: the event must still go with the caller's rollback."""
    db.session.commit()
    target_id, site_id = page("handbook/onboarding").id, page("handbook/onboarding").site_id
    db.session.commit()
    notify.emit("page:edit", site_id=site_id, actor_id=user("bob").id, page_id=target_id,
                snapshot={"title": "t"}, variant="edited")
    db.session.rollback()
    assert events() == []


def test_an_unknown_kind_is_dropped_with_a_warning_naming_it(ctx, caplog):
    """A typo in the wiki's emit: nothing is written, the wiki's write is kept."""
    target = _edit_and_emit()
    notify.emit("page:edited", site_id=target.site_id, page_id=target.id)
    db.session.commit()
    assert "unknown event kind 'page:edited' dropped" in caplog.text
    assert [e.kind for e in events()] == ["page:edit"]


def test_a_kind_of_the_wikis_own_that_nothing_listens_to_is_dropped_quietly(ctx, caplog):
    """No launch category listens to ``comment:delete``; the demo emits it all the same."""
    target = page("handbook/onboarding")
    assert notify.emit("comment:delete", site_id=target.site_id, page_id=target.id) is None
    db.session.commit()
    assert "unknown event kind" not in caplog.text
    assert events() == []
