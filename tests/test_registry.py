"""The category registry (docs/rules.md#a-category-is-a-module): the seven launch categories, the
answer to a suggestion, and the start-up refusals."""

from __future__ import annotations

import dataclasses

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from wikinotify import Category, CategoryError, Channels, ConfigError, WikiNotify
from wikinotify.categories import LAUNCH_CATEGORIES, Registry, endpoint_disabled
from wikinotify.categories.base import N_
from wikinotify.host import Host
from wikinotify.models import Event

LAUNCH = {c.key: c for c in LAUNCH_CATEGORIES}


class NoHost(Host):
    """A host whose every lookup is empty: enough to start the extension."""

    def page_watchers(self, page_id, *, after, limit):
        return []

    def watchers_query(self, page_id):
        return None

    def page_reviewers(self, page, *, after, limit):
        return []

    def pages(self, page_ids):
        return {}

    def comments_exist(self, comment_ids):
        return set()

    def page_url(self, page, *, section=None):
        return "/"

    def mentioned_users(self, text, *, site_id):
        return []

    def comment_author(self, comment_id):
        return None

    def users(self, user_ids):
        return {}

    def check_access(self, group_ids, permission, page):
        return False

    def page_exists(self, page_id):
        return False

    def sites(self):
        return []

    def current_site_id(self):
        return None

    def is_admin(self, user_id):
        return False

    def audit(self, action, *, actor_id, kind, details):
        pass


def bare_app(**config) -> Flask:
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI="sqlite://", **config)
    SQLAlchemy().init_app(app)
    return app


def custom(key="storageSyncFailed", **fields) -> Category:
    base = dict(
        key=key,
        events=frozenset({"page:edit"}),
        section="everything",
        title=N_("Pages you watch"),  # a msgid the French catalogue has
        description=N_("A page you watch is edited, moved, published or deleted."),
        defaults=Channels(True, True),
        priority=1,
        recipients=lambda ctx, event, after, limit: [],
        group_key=lambda event: f"{key}:{event.page_id}",
        told_to_anyone=False,
    )
    return Category(**{**base, **fields})


def test_the_launch_categories_have_the_spec_keys_and_events():
    assert {k: set(c.events) for k, c in LAUNCH.items()} == {
        "watchedPage": {"page:edit", "page:rename", "page:delete"},
        "reviewRequested": {"submission:new", "submission:update"},
        "suggestionReviewed": {"submission:review"},
        "watchedPageComment": {"comment:new"},
        "commentReply": {"comment:new"},
        "mention": {"comment:new", "comment:edit"},
        "pageCreated": {"page:create"},
        "pageDeleted": {"page:delete"},
        # An administrator's announcement (docs/rules.md#announcements).
        "announcement": {"announcement:publish"},
    }


def test_defaults_five_on_and_two_opt_in():
    on = {k for k, c in LAUNCH.items() if c.defaults == Channels(True, True)}
    off = {k for k, c in LAUNCH.items() if c.defaults == Channels(False, False)}
    assert off == {"pageCreated", "pageDeleted"}
    assert on == set(LAUNCH) - off
    assert {k for k, c in LAUNCH.items() if c.opt_in} == off


def test_priorities_follow_the_spec():
    priorities = {k: c.priority for k, c in LAUNCH.items()}
    assert priorities["mention"] == 40
    assert priorities["commentReply"] == 30
    assert priorities["watchedPage"] == 20
    assert priorities["watchedPageComment"] == 10
    assert priorities["pageDeleted"] == 5
    # Where two categories share an event, the higher priority decides
    # (docs/rules.md#one-entry-per-person-per-event).
    registry = Registry(LAUNCH_CATEGORIES)
    assert [c.key for c in registry.listening("comment:new", "user")] == [
        "mention",
        "commentReply",
        "watchedPageComment",
    ]
    assert [c.key for c in registry.listening("page:delete", "user")] == [
        "watchedPage",
        "pageDeleted",
    ]


def test_access_checks_and_scope():
    """A comment is seen on its page: its categories ask for both, as the wiki does."""
    page_and_comments = ("read:pages", "read:comments")
    assert {k: c.access_checks for k, c in LAUNCH.items()} == {
        "watchedPage": ("read:pages",),
        "reviewRequested": (),
        "suggestionReviewed": ("read:pages",),
        "watchedPageComment": page_and_comments,
        "commentReply": page_and_comments,
        "mention": page_and_comments,
        "pageCreated": ("read:pages",),
        "pageDeleted": ("read:pages",),
        # Of the site's home: who cannot read the site hears nothing of it.
        "announcement": ("read:pages",),
    }
    assert {c.scope for c in LAUNCH_CATEGORIES} == {"site"}


def test_only_a_public_pages_own_events_may_be_told_to_anyone():
    """Each says so itself: what a guest could see on a page it may read goes to a
    site-wide receiver; a suggestion, a verdict, a word to one person and wikinotify's
    notice about one person's endpoint are their readers' alone, whatever the page."""
    launch = [*LAUNCH_CATEGORIES, endpoint_disabled.category]
    assert {c.key: c.told_to_anyone for c in launch} == {
        "watchedPage": True, "watchedPageComment": True, "pageCreated": True,
        "pageDeleted": True, "mention": False, "commentReply": False,
        "reviewRequested": False, "suggestionReviewed": False, "endpointDisabled": False,
        "announcement": False,
    }


def test_origins_watched_page_hears_imports_and_bulk_the_others_only_people():
    assert LAUNCH["watchedPage"].origins == {"user", "import", "bulk"}
    for key in set(LAUNCH) - {"watchedPage"}:
        assert LAUNCH[key].origins == {"user"}, key
    registry = Registry(LAUNCH_CATEGORIES)
    assert registry.listening("page:create", "import") == []
    assert [c.key for c in registry.listening("page:delete", "bulk")] == ["watchedPage"]


def test_digest_flag_is_off_only_for_what_someone_waits_on():
    assert {k for k, c in LAUNCH.items() if not c.digest} == {
        "mention",
        "commentReply",
        "reviewRequested",
        "suggestionReviewed",
    }


def test_coalescing_keys():
    event = Event(
        kind="comment:new",
        page_id="p1",
        comment_id="c9",
        submission_id="s4",
        data={"parent_id": "c2"},
    )
    assert {k: c.group_key(event) for k, c in LAUNCH.items()} == {
        "watchedPage": "watchedPage:p1",
        "reviewRequested": "review:s4",
        "suggestionReviewed": "suggestionReviewed:s4",
        "watchedPageComment": "watchedComment:p1",
        "commentReply": "reply:c2",
        "mention": "mention:c9",
        "pageCreated": "pageCreated:p1",
        "pageDeleted": "pageDeleted:p1",
        # Each announcement its own entry (the event's id).
        "announcement": "announcement:None",
    }


def test_variant_and_snapshot_come_from_the_event():
    event = Event(kind="page:edit", data={"variant": "moved", "snapshot": {"title": "Runbook"}})
    assert LAUNCH["watchedPage"].variant(event) == "moved"
    assert LAUNCH["watchedPage"].snapshot(event) == {"title": "Runbook"}


def test_a_new_category_registers_beside_the_launch_ones():
    app = bare_app()
    WikiNotify(app, host=NoHost(), categories=[custom()])
    # After the launch ones and the wiki's own comes wikinotify's notice that a webhook or
    # chat target was turned off, which the delivery engine emits.
    assert list(app.extensions["wikinotify"].registry)[-2:] == [
        "storageSyncFailed", "endpointDisabled"]


def test_duplicate_key_is_refused_at_start_up_naming_it():
    with pytest.raises(CategoryError, match="'mention' is registered twice"):
        WikiNotify(bare_app(), host=NoHost(), categories=[custom(key="mention")])


def test_unknown_key_in_the_category_setting_is_refused_naming_it():
    app = bare_app(WIKINOTIFY_CATEGORIES=["watchedPage", "pageRenamed"])
    with pytest.raises(CategoryError, match=r"unknown categories \['pageRenamed'\]"):
        WikiNotify(app, host=NoHost())


def test_the_category_setting_selects_and_orders():
    app = bare_app(WIKINOTIFY_CATEGORIES=["mention", "watchedPage"])
    WikiNotify(app, host=NoHost())
    # The engine's own notice stays, whatever the wiki selects.
    assert list(app.extensions["wikinotify"].registry) == [
        "mention", "watchedPage", "endpointDisabled"]


def test_a_category_without_translated_strings_is_refused_naming_it():
    untranslated = custom(title=N_("Storage sync failed"))
    with pytest.raises(CategoryError, match=r"'storageSyncFailed' has no 'fr' translation"):
        WikiNotify(bare_app(), host=NoHost(), categories=[untranslated])


def test_a_category_is_checked_only_against_the_languages_offered():
    untranslated = custom(title=N_("Storage sync failed"))
    app = bare_app(WIKINOTIFY_LANGUAGES=["en"])
    WikiNotify(app, host=NoHost(), categories=[untranslated])
    assert "storageSyncFailed" in app.extensions["wikinotify"].registry


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"events": frozenset()}, "needs the event kinds it listens to"),
        ({"events": "storage:syncFailed"}, "needs the event kinds it listens to"),
        ({"events": frozenset({"storage sync"})}, "malformed event kind 'storage sync'"),
        ({"events": frozenset({""})}, "malformed event kind ''"),
        ({"events": frozenset({"Storage:SyncFailed"})}, "malformed event kind"),
        ({"events": frozenset({"storage:sync:failed"})}, "malformed event kind"),
        ({"events": frozenset({"storage:" + "x" * 60})}, "at most 64 characters"),
        # A misspelt kind of the wiki's own would leave the category silently deaf.
        ({"events": frozenset({"page:renamed"})}, "'page:renamed', which is not one of "
                                                  "wikinotify's 'page' kinds"),
        ({"origins": frozenset({"cron"})}, "unknown origins"),
        ({"scope": "global"}, "scope 'global'"),
        ({"section": "misc"}, "section 'misc'"),
        ({"key": "storage-sync"}, "must be an identifier"),
        ({"title": ""}, "needs a title"),
        # The old single-string field: a string is not a tuple of permissions.
        ({"access_checks": "read:pages"}, "access_checks 'read:pages'"),
        # Left out (a category written before the field) or not a yes or no.
        ({"told_to_anyone": None}, "must say whether its entries may be told to anyone: "
                                   "set told_to_anyone"),
        ({"told_to_anyone": "yes"}, "set told_to_anyone"),
    ],
)
def test_a_category_that_cannot_work_is_refused_naming_field(change, message):
    with pytest.raises(CategoryError, match=message):
        Registry([dataclasses.replace(custom(), **change)])


def test_a_category_may_listen_to_kinds_of_the_hosts_own():
    """``noun:verb`` of camelCase words: every kind of the wiki's, and
    docs/adopting.md#adding-a-kind-of-notification's example."""
    registry = Registry([custom(events=frozenset({"storage:syncFailed", "page:edit"}))])
    assert registry.knows("storage:syncFailed") and registry.knows("page:edit")
    assert not registry.knows("storage:syncfailed")
    assert [c.key for c in registry.listening("storage:syncFailed", "user")] == [
        "storageSyncFailed"]


def test_the_wikis_own_kinds_are_known_even_where_nothing_listens():
    """``comment:delete`` has no launch category; the demo emits it, and it is dropped
    quietly, not warned about as a typo."""
    assert Registry().knows("comment:delete")


def test_a_selection_keeps_the_kinds_of_the_categories_it_leaves_out():
    registry = Registry([*LAUNCH_CATEGORIES, custom(events=frozenset({"storage:syncFailed"}))])
    selected = registry.select(["watchedPage"])
    assert "storageSyncFailed" not in selected and selected.knows("storage:syncFailed")


def test_a_category_registers_after_start_up_on_that_app_only():
    app, other = bare_app(), bare_app()
    notify = WikiNotify(host=NoHost())
    notify.init_app(app)
    notify.init_app(other)
    notify.register_category(custom(), app=app)
    assert list(app.extensions["wikinotify"].registry)[-1] == "storageSyncFailed"
    assert "storageSyncFailed" not in other.extensions["wikinotify"].registry
    with pytest.raises(CategoryError, match="'storageSyncFailed' is registered twice"):
        notify.register_category(custom(), app=app)


def test_a_category_after_start_up_is_refused_while_the_category_setting_chooses():
    app = bare_app(WIKINOTIFY_CATEGORIES=["watchedPage"])
    notify = WikiNotify(app, host=NoHost())
    with pytest.raises(CategoryError, match="while WIKINOTIFY_CATEGORIES is set"):
        notify.register_category(custom(), app=app)


def test_a_malformed_kind_is_refused_at_start_up_naming_it():
    bad = custom(events=frozenset({"storage sync failed"}))
    with pytest.raises(CategoryError, match="'storageSyncFailed' listens to the malformed "
                                            "event kind 'storage sync failed'"):
        WikiNotify(bare_app(), host=NoHost(), categories=[bad])


def test_start_up_refuses_a_second_registration():
    app = bare_app()
    notify = WikiNotify(app, host=NoHost())
    with pytest.raises(RuntimeError, match="already registered"):
        notify.init_app(app)


def test_start_up_needs_the_host_and_the_database():
    with pytest.raises(ConfigError, match="host="):
        WikiNotify(bare_app())
    with pytest.raises(ConfigError, match="Flask-SQLAlchemy"):
        WikiNotify(Flask(__name__), host=NoHost())


def test_start_up_refuses_a_language_without_a_catalogue():
    with pytest.raises(ConfigError, match=r"WIKINOTIFY_LANGUAGES lists \['xx'\]"):
        WikiNotify(bare_app(WIKINOTIFY_LANGUAGES=["en", "xx"]), host=NoHost())
    with pytest.raises(ConfigError, match="must list 'en'"):
        WikiNotify(bare_app(WIKINOTIFY_LANGUAGES=["fr"]), host=NoHost())
