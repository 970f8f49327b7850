"""RFC 8058 one-click unsubscribe under load and under attack (docs/rules.md#one-click-unsubscribe):
the same valid token POSTed at once always gets 200s (the write is one upsert); only refused tokens
are rate-limited, per client and per token, so junk never locks a real unsubscribe out; and
it works whichever order the wiki set Flask-WTF's ``CSRFProtect`` and wikinotify up in.
SQLite and PostgreSQL, a real Redis, a real threaded HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
from flask import Flask
from flask_login import LoginManager
from flask_wtf import CSRFProtect

import wikinotify
from demo.extensions import notify
from demo.host import DemoHost
from demo.models import db
from tests.helpers.wiki import alice_token, email_off

URL = "/_notifications/unsubscribe"
ONE_CLICK = {"List-Unsubscribe": "One-Click"}


def post(url: str) -> int:
    data = urllib.parse.urlencode(ONE_CLICK).encode()
    try:
        with urllib.request.urlopen(url, data=data, timeout=20) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_four_simultaneous_one_click_posts_all_get_200(app, live_url):
    url = f"{live_url}{URL}?t={alice_token(app)}"
    start = threading.Barrier(4)
    codes: list[int] = []

    def one() -> None:
        start.wait()
        codes.append(post(url))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes == [200] * 4
    assert email_off(app) == {"watchedPage", "mention"}


@pytest.mark.app_config(WIKINOTIFY_UNSUBSCRIBE_RATE=5)
class TestRateLimit:
    def test_junk_from_one_address_never_locks_out_a_valid_token(self, app):
        client = app.test_client()
        junk = [client.post(URL, query_string={"t": f"junk{n}"}, data=ONE_CLICK).status_code
                for n in range(20)]
        assert junk == [400] * 5 + [429] * 15
        valid = client.post(URL, query_string={"t": alice_token(app)}, data=ONE_CLICK)
        assert valid.status_code == 200
        assert email_off(app) == {"watchedPage", "mention"}

    def test_one_junk_token_is_limited_from_every_address(self, app):
        """Behind a proxy without ProxyFix, or from a botnet: the token is counted too."""
        client = app.test_client()
        codes = [
            client.post(URL, query_string={"t": "the-same-junk"}, data=ONE_CLICK,
                        environ_base={"REMOTE_ADDR": f"10.0.0.{n}"}).status_code
            for n in range(8)
        ]
        assert codes == [400] * 5 + [429] * 3


# -- CSRFProtect, before or after --------------------------------------------------------------


def wiki_with_csrf(database_url: str, redis_url: str, queue: str, *, csrf_first: bool) -> Flask:
    """A small wiki around the demo's models and host, with Flask-WTF's CSRFProtect set up
    before wikinotify's blueprint is registered, or after."""
    app = Flask("csrf_order", instance_path=os.path.join(os.path.dirname(__file__), "_none"))
    app.config.update(SECRET_KEY="csrf-order-test", SQLALCHEMY_DATABASE_URI=database_url,
                      WIKINOTIFY_REDIS_URL=redis_url, WIKINOTIFY_QUEUE=queue,
                      WTF_CSRF_ENABLED=True)
    db.init_app(app)
    LoginManager(app)
    if csrf_first:
        CSRFProtect(app)
    notify.init_app(app, host=DemoHost())
    app.register_blueprint(wikinotify.blueprint)
    if not csrf_first:
        CSRFProtect(app)
    return app


@pytest.mark.parametrize("csrf_first", [True, False], ids=["csrf-first", "csrf-after"])
def test_one_click_works_whichever_order_csrf_was_set_up_in(app, database_url, redis_url,
                                                            queue_name, csrf_first):
    token = alice_token(app)
    wiki = wiki_with_csrf(database_url, redis_url, queue_name, csrf_first=csrf_first)
    response = wiki.test_client().post(URL, query_string={"t": token}, data=ONE_CLICK)
    with wiki.app_context():
        db.engine.dispose()
    assert (response.status_code, response.data) == (200, b"")
    assert email_off(app) == {"watchedPage", "mention"}
    # The exemption is wikinotify's alone: the wiki's own POSTs are still protected.
    assert wiki.extensions["csrf"]._exempt_blueprints == {wikinotify.blueprint}
