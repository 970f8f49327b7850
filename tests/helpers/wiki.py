"""Helpers for the tests that go from a wiki action, through a real RQ worker, to the inbox."""

from __future__ import annotations

import sqlalchemy as sa

from demo import wiki
from demo.models import Page, Site, User, Watch, db
from wikinotify.instance_settings import instance_settings
from wikinotify.models import Event, InstanceSettings, Notification


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
