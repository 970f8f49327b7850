"""The demo wiki as the tests act on it and read it: its accounts, pages, watches and
preferences, written directly or through the wiki's own code, and the entries and events
that follow."""

from __future__ import annotations

import sqlalchemy as sa

from demo import wiki
from demo.extensions import notify
from demo.models import Page, Site, User, Watch, db, user_groups
from wikinotify.instance_settings import instance_settings
from wikinotify.mail.tokens import make_token
from wikinotify.models import Event, InstanceSettings, Notification, Preference


def user(name: str) -> User:
    return db.session.scalar(sa.select(User).where(User.username == name))


def main_site() -> Site:
    return db.session.scalar(sa.select(Site).where(Site.is_default.is_(True)))


def page(path: str, site: Site | None = None) -> Page:
    site = site or main_site()
    return db.session.scalar(sa.select(Page).where(Page.site_id == site.id, Page.path == path))


def edit(path: str, by: str, content: str, title: str | None = None) -> Page:
    """Save ``path`` as ``by`` through the wiki's own code (which emits)."""
    current = page(path)
    return wiki.save_page(
        main_site(), user(by), path, title or (current.title if current else path), content
    )


def watch(path: str, who: str) -> None:
    """Watch rows written directly: also for someone the wiki would not let watch."""
    target, person = page(path), user(who)
    db.session.merge(Watch(page_id=target.id, user_id=person.id, site_id=target.site_id))
    db.session.commit()


def many_watched_edits(count: int) -> None:
    """``count`` pages ``many/p<n>`` that Alice watches, each then edited by Bob: one
    entry each for her once the jobs run."""
    site = main_site()
    for n in range(count):
        wiki.save_page(site, user("admin"), f"many/p{n}", f"Page {n}", "v1")
        watch(f"many/p{n}", "alice")
        edit(f"many/p{n}", "bob", "v2")


def entries_for(name: str, **where) -> list[Notification]:
    db.session.expire_all()
    query = sa.select(Notification).where(Notification.user_id == str(user(name).id))
    for column, value in where.items():
        query = query.where(getattr(Notification, column) == value)
    return list(db.session.scalars(query.order_by(Notification.id)))


def all_entries() -> list[Notification]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(Notification).order_by(Notification.id)))


def events() -> list[Event]:
    db.session.expire_all()
    return list(db.session.scalars(sa.select(Event).order_by(Event.id)))


def set_delay(seconds: int) -> None:
    """The instance's email delay (the window before a new entry's mail is due)."""
    instance_settings(db.session)  # the row `flask db upgrade` writes; create_all does not
    db.session.execute(sa.update(InstanceSettings).values(email_delay_seconds=seconds))
    db.session.commit()


def mail_due_for_readers(count: int) -> list[str]:
    """``count`` new accounts (reader0, reader1, …), each with one entry whose mail is
    due now; returns their addresses. Written directly: a mail run's tests need many
    recipients, not the fan-out that would give them."""
    from datetime import UTC, datetime, timedelta

    readers = [User(username=f"reader{n}", email=f"reader{n}@example.com",
                    display_name=f"Reader {n}") for n in range(count)]
    db.session.add_all(readers)
    db.session.flush()
    site, now = str(main_site().id), datetime.now(UTC)
    db.session.execute(sa.insert(Notification), [
        {"user_id": str(reader.id), "site_id": site, "category": "watchedPage",
         "variant": "edited", "variants": ",edited,", "group_key": "watchedPage:x",
         "page_id": None, "data": {"title": "Runbook", "path": "ops/runbook",
                                   "actor_name": "Bob"},
         "count": 1, "last_event_id": 1, "in_app": True, "email_state": "pending",
         "email_after": now - timedelta(seconds=1), "created_at": now, "updated_at": now}
        for reader in readers
    ])
    db.session.commit()
    return [reader.email for reader in readers]


def set_mail_batch(size: int) -> None:
    """The instance's mail batch size (recipients per mail run)."""
    instance_settings(db.session)
    db.session.execute(sa.update(InstanceSettings).values(mail_batch_size=size))
    db.session.commit()


def prefer(name: str, category: str, **channels: bool) -> None:
    for channel, enabled in channels.items():
        db.session.merge(Preference(user_id=str(user(name).id), category=category,
                                    channel=channel, enabled=enabled))
    db.session.commit()


def add_users(count: int) -> list[str]:
    """``count`` verified accounts in Everyone, written in bulk; their ids as text."""
    everyone = db.session.scalar(sa.text("SELECT id FROM demo_groups WHERE name = 'Everyone'"))
    first = db.session.scalar(sa.select(sa.func.max(User.id))) + 1
    ids = range(first, first + count)
    db.session.execute(sa.insert(User), [
        {"id": i, "username": f"u{i}", "email": f"u{i}@example.com", "display_name": f"U {i}",
         "password_hash": "!", "verified": True, "active": True, "is_system": False,
         "is_admin": False}
        for i in ids
    ])
    db.session.execute(sa.insert(user_groups), [{"user_id": i, "group_id": everyone} for i in ids])
    db.session.commit()
    return [str(i) for i in ids]


def add_watches(target: Page, user_ids: list[str]) -> None:
    db.session.execute(sa.insert(Watch), [
        {"page_id": target.id, "user_id": int(u), "site_id": target.site_id} for u in user_ids])
    db.session.commit()


def emit_edit(target: Page, actor_id: str, variant: str = "edited") -> int:
    event_id = notify.emit("page:edit", site_id=target.site_id, actor_id=actor_id,
                           page_id=target.id, snapshot=wiki.page_snapshot(target),
                           variant=variant)
    assert event_id is not None
    return event_id


def counts_by_user(page_id) -> dict[str, list[tuple[int, bool]]]:
    """Each user's entries about ``page_id``: (count, unread), oldest first."""
    db.session.expire_all()
    rows = db.session.execute(
        sa.select(Notification.user_id, Notification.count, Notification.read_at)
        .where(Notification.page_id == str(page_id)).order_by(Notification.id))
    found: dict[str, list[tuple[int, bool]]] = {}
    for user_id, count, read_at in rows:
        found.setdefault(user_id, []).append((count, read_at is None))
    return found


def alice_token(app, categories=("watchedPage", "mention")) -> str:
    """An unsubscribe token of alice's for ``categories``."""
    with app.app_context():
        secret = instance_settings(db.session).unsubscribe_secret
        db.session.commit()
        return make_token(secret, str(user("alice").id), list(categories))


def email_off(app) -> set[str]:
    """The categories alice has turned email off for."""
    with app.app_context():
        query = sa.select(Preference.category).where(
            Preference.user_id == str(user("alice").id), Preference.channel == "email",
            Preference.enabled.is_(False))
        return set(db.session.scalars(query))
