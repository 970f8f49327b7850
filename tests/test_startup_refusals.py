"""Nothing fails silently: a setting that cannot work, a ``WIKINOTIFY_*`` key that is no
setting, a base template the app cannot load and a mail set-up that cannot send each stop
the app at start-up, with a sentence naming the key and the fix (docs/settings.md); a wiki
that sets Flask-Mail's ``MAIL_*`` settings but never calls ``Mail(app)`` sends its mail;
and the one reason mail cannot be sent is what start-up, the mail job and Admin say
(docs/adopting.md#sending-mail)."""

from __future__ import annotations

import logging

import pytest
from flask import Blueprint, Flask
from flask_mail import Mail
from flask_sqlalchemy import SQLAlchemy

import wikinotify
from tests.helpers.app import make_app
from tests.helpers.jobs import run_jobs
from tests.helpers.memory_host import SITE, MemoryHost, memory_app
from wikinotify import WikiNotify, base_template
from wikinotify.config import DEFAULT_CONFIG, ConfigError, load
from wikinotify.instance_settings import instance_settings
from wikinotify.jobs import appctx
from wikinotify.mail.setup import (
    MAIL_SWITCHED_OFF,
    NO_SENDER,
    mail_configured,
    mail_problem,
)
from wikinotify.outbound import secrets_box
from wikinotify.queue import Job, enqueue
from wikinotify.schemas.administration import SETTING_RANGES
from wikinotify.state import state


def refusal(tmp_path, **config) -> str:
    """The start-up error of the demo wiki built with ``config``."""
    with pytest.raises(ConfigError) as error:
        make_app(f"sqlite:///{tmp_path}/wiki.db", **config)
    return str(error.value)


def loads(**config) -> Flask:
    """A bare app whose settings pass :func:`wikinotify.config.load` (no connection made)."""
    app = Flask(__name__)
    app.config.update(config)
    load(app, instance_settings=SETTING_RANGES)
    return app


# -- the Redis URL --------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "why"), [
    ("localhost:6379", "must specify one of the following schemes"),
    ("redis//127.0.0.1:6379/0", "must specify one of the following schemes"),
    ("redis://127.0.0.1:port/0", "Port could not be cast to integer"),
    ("redis://127.0.0.1:6379/0?sockettimeout=5", "unexpected keyword argument 'sockettimeout'"),
    ("redis://127.0.0.1:6379/0?socket_timeout=soon", "Invalid value for 'socket_timeout'"),
    ("redis://127.0.0.1:6379/zero", "its path 'zero' is not a database number"),
    ("unix://", "it names no socket"),
])
def test_a_redis_url_redis_py_cannot_read_refuses_to_start_naming_the_key_and_the_fix(
        tmp_path, url, why):
    message = refusal(tmp_path, WIKINOTIFY_REDIS_URL=url)
    assert message.startswith(f"WIKINOTIFY_REDIS_URL is {url!r}; give a redis://")
    assert "redis://localhost:6379/0" in message  # the shape of a good one
    assert why in message


@pytest.mark.parametrize("url", [
    "redis://:hunter2@127.0.0.1:port/0",
    "redis://wiki:hunter2@127.0.0.1:6379/zero",
    "redis//wiki:hunter2@127.0.0.1:6379/0",
    "wiki:hunter2@127.0.0.1:6379",
    "redis://127.0.0.1:6379/0?password=hunter2&sockettimeout=5",
])
def test_the_refusal_never_shows_the_urls_password(tmp_path, url):
    message = refusal(tmp_path, WIKINOTIFY_REDIS_URL=url)
    assert message.startswith("WIKINOTIFY_REDIS_URL is ")
    assert "hunter2" not in message
    assert "***" in message


@pytest.mark.parametrize(("url", "why"), [
    # The password holds a '/': to redis-py the netloc ends there, and the password is
    # the port it cannot read; its own message quotes it.
    ("redis://:s3cr3t/pass@host:6379/0", "its port is not a number"),
    ("redis://wiki:s3cr3t#pass@host/0", "its port is not a number"),
    ("redis://:6379/s3cr3t/pass@host/0", "its path is not a database number"),
    ("redis://:s3cr3t/pass@host:6379/0?sockettimeout=5", "its port is not a number"),
])
def test_no_part_of_a_password_redis_py_misreads_is_shown(tmp_path, url, why):
    message = refusal(tmp_path, WIKINOTIFY_REDIS_URL=url)
    assert why in message
    assert "s3cr3t" not in message
    assert "pass@" not in message and "/pass" not in message and "#pass" not in message


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:6379/0", "rediss://wiki:secret@redis.example:6380/2",
    "redis://127.0.0.1/?db=3", "unix:///run/redis/redis.sock?db=1", "redis://127.0.0.1:6379",
    "", None,
])
def test_redis_urls_redis_py_reads_pass(url):
    assert loads(WIKINOTIFY_REDIS_URL=url).config["WIKINOTIFY_REDIS_URL"] == url


# -- the queue name -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "why"), [
    ("notify,mail", "RQ keeps a worker's queue names joined by commas"),
    ("wikinotify-mail", "the mail queue of a wiki whose queue is 'wikinotify'"),
    ("wiki-deliveries", "the deliveries queue of a wiki whose queue is 'wiki'"),
])
def test_a_queue_name_rq_or_the_derived_queues_cannot_take_refuses_to_start(tmp_path, name, why):
    message = refusal(tmp_path, WIKINOTIFY_QUEUE=name)
    assert message.startswith(f"WIKINOTIFY_QUEUE is {name!r}; give a non-empty queue name")
    assert why in message


@pytest.mark.parametrize("name", ["wikinotify", "wiki:main", "wiki.main_2", "mailroom"])
def test_queue_names_rq_takes_pass(name):
    assert loads(WIKINOTIFY_QUEUE=name).config["WIKINOTIFY_QUEUE"] == name


# -- the mail switch and the unsubscribe address ---------------------------------------------


@pytest.mark.parametrize("value", [1, 0, "yes", "True", "false"])
def test_a_mail_switch_that_is_not_a_bool_refuses_to_start(tmp_path, value):
    message = refusal(tmp_path, WIKINOTIFY_MAIL_ENABLED=value)
    assert message.startswith(f"WIKINOTIFY_MAIL_ENABLED is {value!r}; give True, False or None")
    assert "true, false or null" in message  # how to write it in a FLASK_ variable


@pytest.mark.parametrize(("value", "why"), [
    ("mailto:unsubscribe@example.org", "leave out the 'mailto:'"),
    ("unsubscribe@example.org\r\nBcc: everyone@example.org", "cannot contain CR or LF"),
    ("Wiki <unsubscribe@example.org>", "it is not an address"),
    ("unsubscribe", "it is not an address"),
    ('"un subscribe"@example.org', "not a plain ASCII address"),
    ("un?subscribe@example.org", "escaped (RFC 6068)"),
    (42, "it is not a string"),
])
def test_an_unsubscribe_mailto_that_is_not_an_address_refuses_to_start(tmp_path, value, why):
    message = refusal(tmp_path, WIKINOTIFY_UNSUBSCRIBE_MAILTO=value)
    assert message.startswith(f"WIKINOTIFY_UNSUBSCRIBE_MAILTO is {value!r}; give an e-mail "
                              "address such as unsubscribe@example.org")
    assert why in message


@pytest.mark.parametrize("value", ["unsubscribe@example.org", "list+off@mail.example.org",
                                   None, ""])
def test_a_plain_address_passes(value):
    assert loads(WIKINOTIFY_UNSUBSCRIBE_MAILTO=value).config[
        "WIKINOTIFY_UNSUBSCRIBE_MAILTO"] == value


# -- timings that count on RQ's job timeout ----------------------------------------------------


@pytest.mark.parametrize(("key", "value", "says"), [
    ("WIKINOTIFY_MAIL_LEASE", 60, "may have its mail claimed and sent again"),
    ("WIKINOTIFY_STALE_CLAIM_SECONDS", 600, "may be taken over and done twice"),
    ("WIKINOTIFY_DISPATCH_BUDGET", 900, "before it saves its cursor"),
])
def test_a_timing_that_defeats_rqs_job_timeout_is_said_at_start_up(
        tmp_path, caplog, key, value, says):
    with caplog.at_level(logging.WARNING, logger="wikinotify"):
        make_app(f"sqlite:///{tmp_path}/wiki.db", **{key: value})
    [warning] = [message for message in caplog.messages if key in message]
    assert warning.startswith(f"wikinotify: {key} is {value}, ")
    assert "RQ's job timeout (600 s)" in warning and says in warning


def test_the_default_timings_say_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="wikinotify"):
        make_app(f"sqlite:///{tmp_path}/wiki.db")
    assert not [message for message in caplog.messages if "job timeout" in message]


# -- keys that are no setting -----------------------------------------------------------------


@pytest.mark.parametrize(("key", "meant"), [
    ("WIKINOTIFY_EMAIL_DELAY", "emailDelaySeconds"),
    ("WIKINOTIFY_RETENTION", "retentionDays"),
    ("WIKINOTIFY_MAIL_BATCH", "mailBatchSize"),
])
def test_a_key_meaning_an_instance_setting_says_where_it_is_set(tmp_path, key, meant):
    message = refusal(tmp_path, **{key: 60})
    assert message.startswith(f"{key} is not a wikinotify setting; did you mean {meant}? ")
    assert "instance setting" in message
    assert "Admin → Notifications (/_notifications/admin" in message


@pytest.mark.parametrize(("key", "meant"), [
    ("WIKINOTIFY_QUEUES", "WIKINOTIFY_QUEUE"),
    ("WIKINOTIFY_REDIS", "WIKINOTIFY_REDIS_URL"),
    ("WIKINOTIFY_MAIL_ENABLE", "WIKINOTIFY_MAIL_ENABLED"),
    ("WIKINOTIFY_SMTP_TIMEOUTS", "WIKINOTIFY_SMTP_TIMEOUT"),
])
def test_a_misspelled_key_refuses_to_start_naming_the_nearest_setting(tmp_path, key, meant):
    assert refusal(tmp_path, **{key: "x"}) == (
        f"{key} is not a wikinotify setting; did you mean {meant}? every setting is in "
        "docs/settings.md.")


def test_a_key_like_no_setting_is_refused_all_the_same(tmp_path):
    assert refusal(tmp_path, WIKINOTIFY_XYZZY=1) == (
        "WIKINOTIFY_XYZZY is not a wikinotify setting; remove it; every setting is in "
        "docs/settings.md.")


def test_every_setting_of_the_table_is_a_known_key():
    assert loads(**DEFAULT_CONFIG).config["WIKINOTIFY_QUEUE"] == "wikinotify"


# -- the base template --------------------------------------------------------------------------


@pytest.fixture
def bare(tmp_path, redis_url):
    """A wiki with wikinotify set up and nothing registered yet, its templates in
    ``tmp_path/templates``."""

    def build(template_folder: str = "templates", **config) -> Flask:
        app = Flask("bare_wiki", root_path=str(tmp_path), template_folder=template_folder)
        app.config.update(SECRET_KEY="test", SQLALCHEMY_DATABASE_URI="sqlite://",
                          WIKINOTIFY_REDIS_URL=redis_url, **config)
        SQLAlchemy().init_app(app)
        WikiNotify(app, host=MemoryHost())
        return app

    (tmp_path / "templates").mkdir()
    (tmp_path / "theme").mkdir()
    return build


BASE = ("{% block title %}{% endblock %}{% block content %}{% endblock %}"
        "{% block scripts %}{% endblock %}")


def test_a_base_template_that_does_not_exist_refuses_naming_the_folders_searched(
        bare, tmp_path):
    app = bare(WIKINOTIFY_BASE_TEMPLATE="site/base.html")
    with pytest.raises(ConfigError) as error:
        app.register_blueprint(wikinotify.blueprint)
    message = str(error.value)
    assert message.startswith("WIKINOTIFY_BASE_TEMPLATE is 'site/base.html', but the app has "
                              "no template 'site/base.html' (searched: ")
    assert str(tmp_path / "templates") in message
    assert "register it before wikinotify's blueprint" in message


def test_a_base_template_in_a_blueprint_registered_after_wikinotifys_is_refused(bare, tmp_path):
    (tmp_path / "theme" / "theme_base.html").write_text(BASE)
    theme = Blueprint("theme", __name__, template_folder=str(tmp_path / "theme"))
    app = bare(WIKINOTIFY_BASE_TEMPLATE="theme_base.html")
    with pytest.raises(ConfigError, match="register it before wikinotify's blueprint"):
        app.register_blueprint(wikinotify.blueprint)

    app = bare(WIKINOTIFY_BASE_TEMPLATE="theme_base.html")
    app.register_blueprint(theme)
    app.register_blueprint(wikinotify.blueprint)  # the theme's folder is searched now


def test_a_base_template_without_a_block_wikinotifys_pages_fill_is_refused(bare, tmp_path):
    (tmp_path / "templates" / "base.html").write_text(
        "{% block title %}{% endblock %}{% block body %}{% endblock %}"
        "{% block scripts %}{% endblock %}")
    app = bare(WIKINOTIFY_BASE_TEMPLATE="base.html")
    with pytest.raises(ConfigError) as error:
        app.register_blueprint(wikinotify.blueprint)
    assert str(error.value).startswith(
        "WIKINOTIFY_BASE_TEMPLATE is 'base.html', which defines no block content: ")


def test_a_block_only_a_template_in_the_middle_defines_is_refused(bare, tmp_path):
    """Jinja renders the blocks of the template at the root of the chain: a block the
    root lacks shows nothing, wherever below it is defined."""
    (tmp_path / "templates" / "layout.html").write_text(
        "{% block title %}{% endblock %}{% block content %}{% endblock %}")
    (tmp_path / "templates" / "middle.html").write_text(
        '{% extends "layout.html" %}{% block scripts %}{% endblock %}')
    (tmp_path / "templates" / "base.html").write_text(
        '{% extends "middle.html" %}{% block content %}{% endblock %}')
    app = bare(WIKINOTIFY_BASE_TEMPLATE="base.html")
    with pytest.raises(ConfigError) as error:
        app.register_blueprint(wikinotify.blueprint)
    assert str(error.value).startswith(
        "WIKINOTIFY_BASE_TEMPLATE is 'base.html', whose chain of {% extends %} ends at "
        "'layout.html', which defines no block scripts: ")


def test_a_parent_in_a_blueprint_registered_later_is_taken_on_trust(bare, tmp_path):
    (tmp_path / "templates" / "base.html").write_text('{% extends "theme_base.html" %}')
    (tmp_path / "theme" / "theme_base.html").write_text(BASE)
    theme = Blueprint("theme", __name__, template_folder=str(tmp_path / "theme"))
    app = bare(WIKINOTIFY_BASE_TEMPLATE="base.html")
    app.register_blueprint(wikinotify.blueprint)
    app.register_blueprint(theme)  # the wiki works: its pages render once this is in


def test_the_check_leaves_flasks_jinja_environment_unbuilt(bare, tmp_path):
    """Flask builds app.jinja_env once, from app.jinja_options as they are then: the check
    reads templates through an environment of its own, never building the app's."""
    (tmp_path / "templates" / "base.html").write_text(BASE)
    app = bare(WIKINOTIFY_BASE_TEMPLATE="base.html")
    app.register_blueprint(wikinotify.blueprint)
    del app.jinja_env  # Flask's cached property: built again at its next use
    base_template.check(app, wikinotify.blueprint)
    assert "jinja_env" not in vars(app)


def test_a_base_template_with_a_tag_of_an_extension_added_later_is_taken_on_trust(
        bare, tmp_path):
    (tmp_path / "templates" / "base.html").write_text("{% cache 60 %}{% endcache %}" + BASE)
    app = bare(WIKINOTIFY_BASE_TEMPLATE="base.html")
    app.register_blueprint(wikinotify.blueprint)  # the wiki adds {% cache %} after this


def test_the_template_is_checked_at_init_app_when_the_blueprint_came_first(tmp_path, redis_url):
    app = Flask("bare_wiki", root_path=str(tmp_path))
    app.config.update(SQLALCHEMY_DATABASE_URI="sqlite://", WIKINOTIFY_REDIS_URL=redis_url,
                      WIKINOTIFY_BASE_TEMPLATE="missing.html")
    SQLAlchemy().init_app(app)
    app.register_blueprint(wikinotify.blueprint)
    with pytest.raises(ConfigError, match="^WIKINOTIFY_BASE_TEMPLATE is 'missing.html', but"):
        WikiNotify(app, host=MemoryHost())


def test_wikinotifys_own_layout_and_the_demos_base_pass(bare, tmp_path):
    bare().register_blueprint(wikinotify.blueprint)
    make_app(f"sqlite:///{tmp_path}/wiki.db")  # demo/wikinotify_base.html


WORKERS_WIKI = """
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

import wikinotify
from tests.helpers.memory_host import MemoryHost
from wikinotify import WikiNotify


def create_app(secret_key, blueprint):
    app = Flask(__name__)
    app.config.update(SECRET_KEY=secret_key, SQLALCHEMY_DATABASE_URI="sqlite://",
                      WIKINOTIFY_REDIS_URL=%r)
    SQLAlchemy().init_app(app)
    WikiNotify(app, host=MemoryHost())
    if blueprint:
        app.register_blueprint(wikinotify.blueprint)
    return app
"""


@pytest.mark.parametrize(("factory", "says"), [
    ("create_app('secret', blueprint=False)",
     "has not registered wikinotify's blueprint, whose pages every mail links to: call "
     "app.register_blueprint(wikinotify.blueprint) in the app factory."),
    ("create_app(None, blueprint=True)",
     "has no SECRET_KEY, from which wikinotify derives the key that seals webhook secrets "
     "and chat targets: give the workers the web's (FLASK_SECRET_KEY), which opens what "
     "the web sealed."),
])
def test_a_worker_refuses_a_wiki_app_its_jobs_would_fail_under(
        tmp_path, monkeypatch, redis_url, factory, says):
    """The app a worker builds for its jobs (FLASK_APP): each mail would fail at its
    links, each webhook at its sealed secret."""
    (tmp_path / "workers_wiki.py").write_text(WORKERS_WIKI % redis_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLASK_APP", f"workers_wiki:{factory}")
    monkeypatch.setattr(appctx, "_app", None)
    with pytest.raises(ConfigError) as error:
        appctx.host_app()
    assert str(error.value).startswith("The app the worker built (workers_wiki, ")
    assert str(error.value).endswith(says)


def test_a_worker_builds_a_wiki_app_fit_for_its_jobs(tmp_path, monkeypatch, redis_url):
    (tmp_path / "workers_wiki.py").write_text(WORKERS_WIKI % redis_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLASK_APP", "workers_wiki:create_app('secret', blueprint=True)")
    monkeypatch.setattr(appctx, "_app", None)
    assert appctx.host_app().import_name == "workers_wiki"


# -- the mail set-up ----------------------------------------------------------------------------


def test_mail_enabled_without_a_sender_refuses_to_start_naming_mail_default_sender(
        tmp_path, redis_url):
    with pytest.raises(ConfigError) as error:
        memory_app(MemoryHost(), "sqlite://", WIKINOTIFY_REDIS_URL=redis_url,
                   WIKINOTIFY_MAIL_ENABLED=True, MAIL_SERVER="127.0.0.1")
    assert str(error.value) == (
        f"WIKINOTIFY_MAIL_ENABLED is True, but mail cannot be sent. {NO_SENDER}")
    assert "set MAIL_DEFAULT_SENDER" in NO_SENDER


@pytest.fixture(params=[None, True], ids=["mail-enabled-unset", "mail-enabled-true"])
def wiki_without_flask_mail(request, database_url, redis_url, queue_name, smtp):
    """A wiki that sets Flask-Mail's settings and never calls ``Mail(app)``, with
    ``WIKINOTIFY_MAIL_ENABLED`` unset and True; bob watches the onboarding page and mail
    goes at once."""
    host = MemoryHost()
    host.groups["everyone"] = {"read:pages"}
    for name in ("alice", "bob"):
        host.add_account(name, "everyone")
    host.add_page("1", "handbook/onboarding", "Onboarding")
    host.watch("1", "bob")
    app = memory_app(host, database_url, WIKINOTIFY_REDIS_URL=redis_url,
                     WIKINOTIFY_QUEUE=queue_name, WIKINOTIFY_MAIL_ENABLED=request.param,
                     MAIL_SERVER="127.0.0.1", MAIL_PORT=smtp.port,
                     MAIL_DEFAULT_SENDER="Wiki <wiki@memory.example>", MAIL_SUPPRESS_SEND=False)
    app.register_blueprint(wikinotify.blueprint)  # a mail links to the inbox
    with app.app_context():
        instance_settings(state().db.session()).email_delay_seconds = 0
        state().db.session.commit()
        yield app
        state().db.session.remove()
        state().db.engine.dispose()


def test_a_wiki_that_never_called_mail_app_sends_its_mail(wiki_without_flask_mail, smtp):
    app = wiki_without_flask_mail
    assert mail_problem(app) is None
    WikiNotify.emit("page:edit", site_id=SITE.id, actor_id="alice", page_id="1",
                    snapshot=dict(state().host.pages(["1"])["1"]), variant="edited")
    state().db.session.commit()
    run_jobs(app)
    assert smtp.inbox.recipients == ["bob@memory.example"]
    assert smtp.inbox.messages[0]["From"] == "Wiki <wiki@memory.example>"


def test_without_a_sender_the_mail_job_logs_the_one_reason_and_email_reads_off(
        database_url, redis_url, queue_name, caplog):
    host = MemoryHost()
    app = memory_app(host, database_url, WIKINOTIFY_REDIS_URL=redis_url,
                     WIKINOTIFY_QUEUE=queue_name, MAIL_SERVER="127.0.0.1")
    with app.app_context():
        assert (mail_problem(), mail_configured()) == (NO_SENDER, False)
        enqueue(app, Job.SEND_MAIL)
        with caplog.at_level(logging.INFO, logger="wikinotify"):
            run_jobs(app)
        state().db.engine.dispose()
    assert f"wikinotify: mail cannot be sent; nothing sent. {NO_SENDER}" in caplog.messages


def test_the_wikis_own_flask_mail_is_kept(tmp_path, redis_url):
    app = Flask("own_mail")
    app.config.update(SQLALCHEMY_DATABASE_URI="sqlite://", WIKINOTIFY_REDIS_URL=redis_url,
                      MAIL_DEFAULT_SENDER="wiki@example.org")
    SQLAlchemy().init_app(app)
    own = Mail(app)
    WikiNotify(app, host=MemoryHost())
    assert app.extensions["mail"] is own.state


def test_mail_switched_off_is_the_reason_whatever_else_is_set(tmp_path, redis_url):
    app = memory_app(MemoryHost(), "sqlite://", WIKINOTIFY_REDIS_URL=redis_url,
                     WIKINOTIFY_MAIL_ENABLED=False, MAIL_DEFAULT_SENDER="wiki@example.org")
    assert mail_problem(app) == MAIL_SWITCHED_OFF


@pytest.mark.parametrize("secret_key", [None, ""])
def test_the_worker_and_the_secrets_box_refuse_a_missing_secret_key_by_one_rule(secret_key):
    app = Flask(__name__)
    app.config["SECRET_KEY"] = secret_key
    missing = secrets_box.missing_key(app)
    assert missing is not None and missing.startswith("has no SECRET_KEY")
    with pytest.raises(ConfigError) as error:
        secrets_box.seal("a webhook secret", app)
    assert missing in str(error.value)
    app.config["SECRET_KEY"] = "set"
    assert secrets_box.missing_key(app) is None
