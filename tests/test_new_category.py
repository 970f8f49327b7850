"""``flask wikinotify new-category NAME`` (docs/adopting.md#adding-a-kind-of-notification): the
module it writes registers, listens to its kind and goes through a real fan-out; what it refuses, it
says why. The end-to-end test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_file
from babel.messages.mofile import write_mo
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from demo.extensions import notify
from demo.host import DemoHost
from demo.models import Group, db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import entries_for, user
from wikinotify import WikiNotify
from wikinotify.categories import Registry

API = "/_notifications/api/notifications"


def new_category(app, *args: str):
    return app.test_cli_runner().invoke(args=["wikinotify", "new-category", *args])


def load_module(path: Path):
    """Import the written file, as the wiki imports its own modules."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def translate(module_path: Path, directory: Path, languages) -> None:
    """Step three, as a wiki does it: extract the module's strings (``pybabel extract``
    finds ``N_``), translate them into every language the wiki offers (the step names them)
    and compile each catalogue into a directory listed in BABEL_TRANSLATION_DIRECTORIES."""
    for language in languages:
        if language == "en":
            continue
        catalog = Catalog(locale=language)
        with open(module_path, "rb") as source:
            for _line, msgid, _comments, _context in extract_from_file("python", source.name):
                catalog.add(msgid, f"{language.upper()} {msgid}")
        target = directory / language / "LC_MESSAGES" / "messages.mo"
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as mo:
            write_mo(mo, catalog)


@pytest.fixture
def wiki(tmp_path) -> Flask:
    """A wiki whose package is ``tmp_path/wiki``: enough to run the command, no tables."""
    package = tmp_path / "wiki"
    package.mkdir()
    app = Flask("wiki", root_path=str(package))
    app.config["SQLALCHEMY_DATABASE_URI"] = "sqlite://"
    SQLAlchemy().init_app(app)
    WikiNotify(app, host=DemoHost())
    return app


@pytest.fixture
def translations(tmp_path) -> Path:
    return tmp_path / "translations"


pytestmark = pytest.mark.app_config(
    lambda translations: {"BABEL_TRANSLATION_DIRECTORIES": f"translations;{translations}"})


def test_the_written_category_registers_and_goes_through_a_fan_out(app, tmp_path, translations):
    result = new_category(app, "backupFailed", "--directory", str(tmp_path),
                          "--scope", "instance", "--group-by", "target_id",
                          "--origin", "user", "--origin", "import", "--told-to-anyone")
    assert result.exit_code == 0, result.output
    path = tmp_path / "backup_failed.py"
    assert f"Wrote {path}: the category 'backupFailed', listening to backup:failed." in (
        result.output)
    assert "Three steps remain:" in result.output
    for step in ("notify = WikiNotify(host=MyHost(), categories=[backup_failed.category])",
                 'notify.emit("backup:failed", site_id=None, actor_id=user.id, '
                 'snapshot={"title": ...}, target_id=...)',
                 "BABEL_TRANSLATION_DIRECTORIES"):
        assert step in result.output

    category = load_module(path).category
    assert (category.key, category.events, category.scope, category.origins,
            category.told_to_anyone) == (
        "backupFailed", {"backup:failed"}, "instance", {"user", "import"}, True)
    assert "3. Translate its strings into fr, de:" in result.output  # every language offered
    translate(path, translations, app.config["WIKINOTIFY_LANGUAGES"])
    notify.register_category(category, app=app)

    with app.app_context():
        db.session.add(Group(name="Sysadmins", permissions=["manage:system"],
                             members=[user("admin")]))
        notify.emit("backup:failed", site_id=None, actor_id=user("alice").id,
                    snapshot={"title": "Nightly"}, target_id="nightly")
        db.session.commit()
        run_jobs(app)
        [entry] = entries_for("admin")
        assert (entry.category, entry.group_key, entry.site_id) == (
            "backupFailed", "backupFailed:nightly", None)
        assert entries_for("alice") == [] and entries_for("bob") == []
    client = app.test_client()
    login(client, "admin")
    [item] = client.get(API).get_json()["items"]
    assert item["text"] == "Backup failed: Nightly"
    assert "Backup failed" in client.get("/_notifications/preferences").get_data(as_text=True)


def test_the_defaults_a_page_a_site_and_the_name_read_as_the_kind(wiki):
    result = new_category(wiki, "exportPdfDone")
    assert result.exit_code == 0, result.output
    # By default, into the app's package (its root path).
    category = load_module(Path(wiki.root_path) / "export_pdf_done.py").category
    assert category.events == {"export:pdfDone"}
    assert (category.scope, category.origins, category.section) == ("site", {"user"},
                                                                     "everything")
    assert category.access_checks == ("read:pages",)  # grouped by page: about a page
    assert category.told_to_anyone is False  # its readers alone, unless told
    assert category.title == "Export pdf done"
    Registry([category])  # validates


def test_it_never_overwrites_a_file(wiki):
    path = Path(wiki.root_path) / "backup_failed.py"
    path.write_text("# the wiki's own work\n")
    result = new_category(wiki, "backupFailed")
    assert result.exit_code == 1
    assert "exists already; it is left as it was" in result.output
    assert path.read_text() == "# the wiki's own work\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Backup-Failed"], "'Backup-Failed' is not a category key: give a camelCase word"),
        (["backup_failed"], "'backup_failed' is not a category key"),
        (["import"], "'import' is not a category key"),
        (["watchedPage"], "'watchedPage' is a category of this app already"),
        (["backup"], "give it with --event noun:verb"),
        (["backupFailed", "--event", "backup failed"], "malformed event kind 'backup failed'"),
        (["pageApproved"], "'page:approved', which is not one of wikinotify's 'page' kinds"),
        (["backupFailed", "--sentence", "%(target)s failed"], "it may name %(title)s"),
        (["backupFailed", "--group-by", "target-id"], "'target-id' is not a field name"),
    ],
)
def test_it_refuses_what_cannot_work_saying_why(wiki, args, message):
    result = new_category(wiki, *args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert list(Path(wiki.root_path).iterdir()) == []
