"""The settings table (``wikinotify.config.SETTINGS``) is the one place a ``WIKINOTIFY_*``
key is declared: the code reads no other, ``init_app`` gives the app its defaults and
refuses what its rules refuse, and ``docs/settings.md`` is what the table writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flask import Flask

from tests.helpers.app import ROOT, make_app
from wikinotify import WikiNotify
from wikinotify.config import DEFAULT_CONFIG, SETTINGS, ConfigError, load, reference

REFERENCE = Path(ROOT) / "docs" / "settings.md"

#: For each rule, values it refuses (each stands for a mistake a wiki could make).
WRONG = [None, "", "30", object(), True, -1, 0, 10**9, ["x", 1], "often"]


def test_docs_settings_md_is_what_the_table_writes():
    assert REFERENCE.read_text() == reference(), (
        "docs/settings.md differs from wikinotify/config.py's SETTINGS: run scripts/settings"
    )


def test_init_apps_docstring_points_at_the_reference_instead_of_repeating_it():
    docstring = WikiNotify.init_app.__doc__ or ""
    assert "docs/settings.md" in docstring
    assert not re.search(r"``WIKINOTIFY_[A-Z]", docstring)


def test_every_key_the_code_names_is_in_the_table():
    """A key read or mentioned anywhere in wikinotify/ is declared (a prefix such as
    ``WIKINOTIFY_DKIM_*`` names several)."""
    keys = {setting.key for setting in SETTINGS}
    assert len(keys) == len(SETTINGS), "a key is declared twice"
    named = {name for path in (Path(ROOT) / "wikinotify").rglob("*.py")
             for name in re.findall(r"WIKINOTIFY_[A-Z_]*", path.read_text())}
    undeclared = {name for name in named
                  if name not in keys and not any(key.startswith(name) for key in keys)}
    assert not undeclared
    read = {f"WIKINOTIFY_{name}" for path in (Path(ROOT) / "wikinotify").rglob("*.py")
            for name in re.findall(r"\bconfig\(\"([A-Z_]+)\"", path.read_text())}
    assert read <= keys


def test_every_default_passes_its_own_rule():
    app = Flask(__name__)
    load(app)
    assert {key: app.config[key] for key in DEFAULT_CONFIG} == DEFAULT_CONFIG


def test_the_wikis_own_value_wins_over_the_default():
    app = Flask(__name__)
    app.config["WIKINOTIFY_QUEUE"] = "elsewhere"
    load(app)
    assert app.config["WIKINOTIFY_QUEUE"] == "elsewhere"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: setting.key)
def test_each_rule_refuses_a_wrong_value_naming_the_key_and_what_it_must_be(setting):
    refused = [value for value in WRONG if not setting.must.holds(value)]
    assert refused, f"{setting.key} accepts anything"
    for value in refused:
        app = Flask(__name__)
        app.config[setting.key] = value
        with pytest.raises(ConfigError) as error:
            load(app)
        assert str(error.value).startswith(f"{setting.key} is {setting.must.shows(value)}; give ")
        assert setting.must.says in str(error.value)


@pytest.mark.parametrize(("key", "value"), [
    ("WIKINOTIFY_STALE_CLAIM_SECONDS", 0),
    ("WIKINOTIFY_QUEUE", ""),
    ("WIKINOTIFY_MAIL_ENABLED", "yes"),
    ("WIKINOTIFY_REDIS_URL", "http://127.0.0.1:6379"),
    ("WIKINOTIFY_FANOUT_RANGE_SIZE", 2.5),
    ("WIKINOTIFY_MAIL_SETTINGS_URL", "//elsewhere.example/mail"),
    ("WIKINOTIFY_MAIL_SETTINGS_URL", "javascript:alert(1)"),
])
def test_init_app_checks_every_key_from_the_table(tmp_path, key, value):
    with pytest.raises(ConfigError, match=f"^{key} is "):
        make_app(f"sqlite:///{tmp_path}/x.db", **{key: value})


TOKEN = 918273645546372819
PEM = (b"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
       b"-----END PRIVATE KEY-----\n")


@pytest.mark.parametrize(("key", "value", "shown"), [
    # FLASK_WIKINOTIFY_METRICS_TOKEN=918273645546372819 reaches the config as an int.
    ("WIKINOTIFY_METRICS_TOKEN", TOKEN, "a value of type int;"),
    ("WIKINOTIFY_DKIM_PRIVATE_KEY", PEM, "a value of type bytes;"),
    ("WIKINOTIFY_SITE_URL", "https://wiki:hunter2@wiki.example.org/?x=1", "'https://***@"),
])
def test_a_refused_secret_is_never_shown(key, value, shown):
    app = Flask(__name__)
    app.config[key] = value
    with pytest.raises(ConfigError) as error:
        load(app)
    message = str(error.value)
    assert message.startswith(f"{key} is {shown}")
    for secret in (str(TOKEN), "MIIEvQ", "PRIVATE KEY", "hunter2"):
        assert secret not in message
