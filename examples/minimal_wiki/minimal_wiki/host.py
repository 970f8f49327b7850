"""The wiki as wikinotify sees it: the seven methods every host writes. Every page is
readable by everyone; the other methods keep their defaults (no approvals or comments)."""

from flask import current_app

from wikinotify import Host, SiteFacts, UserFacts

from .models import Page, User, Watch, db


def _ints(ids):
    return [int(i) for i in ids if str(i).isdigit()]


class MinimalHost(Host):
    def page_watchers(self, page_id, *, after, limit):
        query = db.select(Watch.user_id).where(Watch.page_id.in_(_ints([page_id])))
        if after is not None:
            query = query.where(Watch.user_id > int(after))
        return [str(u) for u in db.session.scalars(query.order_by(Watch.user_id).limit(limit))]

    def users(self, user_ids):
        found = db.session.scalars(db.select(User).where(User.id.in_(_ints(user_ids))))
        return {str(u.id): UserFacts(id=str(u.id), display_name=u.name, email=u.email)
                for u in found}

    def check_access(self, group_ids, permission, page):
        return True

    def pages(self, page_ids):
        found = db.session.scalars(db.select(Page).where(Page.id.in_(_ints(page_ids))))
        return {str(p.id): {"id": str(p.id), "site_id": "main", "path": p.slug, "title": p.title}
                for p in found}

    def page_url(self, page, *, section=None):
        return f"/pages/{page['path']}"

    def sites(self):
        return [SiteFacts(id="main", base_url=current_app.config["WIKI_URL"], title="Wiki")]

    def is_admin(self, user_id):
        query = db.select(User.is_admin).where(User.id.in_(_ints([user_id])))
        return bool(db.session.scalar(query))
