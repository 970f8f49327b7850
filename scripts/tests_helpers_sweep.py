"""Point the tests' imports at ``tests/helpers/``: re-runnable, and a no-op once done.

The suite's helpers moved out of ``tests/conftest.py``, out of the helper modules at the top
of ``tests/`` (``pipeline.py``, now ``helpers/wiki.py``; ``browser.py``, ``sse.py``,
``smtp.py``, ``receiver.py``, ``custom_category.py``) and out of the test modules other
tests imported them from. Run it after merging a branch whose tests still import the old
places::

    python scripts/tests_helpers_sweep.py          # rewrites tests/ and bench/ in place
    python scripts/tests_helpers_sweep.py --check  # lists what it would change; exit 1 if any

A name it does not know (a helper added to conftest or to a test module since) stops it
with the file and the name: move that helper into ``tests/helpers/`` and add it to
:data:`CONFTEST` or :data:`FROM_TEST_MODULES` below. A test module that still defines its
own ``app_config`` fixture works (it overrides the suite's) and is named in a note: give it
an ``app_config`` mark instead.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE_LENGTH = 100

#: The helper modules that left the top of tests/: old module -> new module.
MODULES = {
    "tests.pipeline": "tests.helpers.wiki",
    "tests.browser": "tests.helpers.browser",
    "tests.sse": "tests.helpers.sse",
    "tests.smtp": "tests.helpers.smtp",
    "tests.receiver": "tests.helpers.receiver",
    "tests.custom_category": "tests.helpers.custom_category",
}

#: What conftest.py exported and where it lives now (the fixtures stay in conftest).
CONFTEST = {
    **dict.fromkeys(["ROOT", "make_app", "seeded_app", "dispose", "mail_settings"],
                    "tests.helpers.app"),
    **dict.fromkeys(["RQ", "WORKER_SETTINGS", "worker_env", "run_worker", "worker_command",
                     "app_queues", "fail_on_failed_jobs", "run_jobs"], "tests.helpers.jobs"),
    **dict.fromkeys(["PG_ENV", "REDIS_ENV", "postgres_base_url", "url_in_schema",
                     "PostgresSchema", "postgres_or_skip", "_postgres_or_skip",
                     "named_database_url", "connections_named", "terminate_connections",
                     "empty_everything", "_truncate_everything"], "tests.helpers.database"),
    **dict.fromkeys(["login", "csrf_token", "login_with_csrf"], "tests.helpers.web"),
}

#: Helpers test modules exported to other test modules, and where they live now.
FROM_TEST_MODULES = {
    "tests.test_mail": {"bodies": "tests.helpers.mail", "deliver": "tests.helpers.jobs"},
    "tests.test_pipeline": {"enqueue_cron_jobs": "tests.helpers.jobs",
                            "prefer": "tests.helpers.wiki"},
    "tests.test_faults_fanout": {
        **dict.fromkeys(["STALE_SECONDS", "start_worker", "finish", "wait_for"],
                        "tests.helpers.jobs"),
        **dict.fromkeys(["add_users", "add_watches", "emit_edit", "counts_by_user"],
                        "tests.helpers.wiki"),
    },
    "tests.test_fanout_writes": {"entries_refused_for": "tests.helpers.database"},
    "tests.test_unsubscribe": {"alice_token": "tests.helpers.wiki",
                               "email_off": "tests.helpers.wiki"},
    "tests.test_mail_failures": {"wait_for": "tests.helpers.jobs"},
    "tests.test_mail_lint": {"ENCODED_WORD": "tests.helpers.mail",
                             "read_list_id": "tests.helpers.mail", "parse": "tests.helpers.mail"},
    "tests.test_mail_headers": {"parse": "tests.helpers.mail"},
}

#: Helpers that lost their leading underscore when they became a module's public names.
RENAMED = {"_postgres_or_skip": "postgres_or_skip", "_truncate_everything": "empty_everything"}

#: Paths named in prose (docstrings, comments, Markdown).
PATHS = {f"tests/{old.split('.')[-1]}.py": f"tests/helpers/{new.split('.')[-1]}.py"
         for old, new in MODULES.items()}


class Unknown(Exception):
    """An import of a name the sweep does not know where to send."""


def target(module: str, name: str, where: str) -> str:
    if module in MODULES:
        return MODULES[module]
    if module == "tests.conftest":
        if name in CONFTEST:
            return CONFTEST[name]
        raise Unknown(f"{where}: imports {name!r} from tests.conftest, which keeps only "
                      "fixtures: move it into tests/helpers/ and add it to CONFTEST")
    moved = FROM_TEST_MODULES.get(module, {})
    if name in moved:
        return moved[name]
    raise Unknown(f"{where}: imports {name!r} from the test module {module}: move it into "
                  "tests/helpers/ and add it to FROM_TEST_MODULES")


def needs_sweep(node: ast.ImportFrom) -> bool:
    module = node.module or ""
    if node.level or not module.startswith("tests"):
        return False
    if module == "tests":
        return any(f"tests.{alias.name}" in MODULES for alias in node.names)
    return module in MODULES or module == "tests.conftest" or module.startswith("tests.test_")


def rendered(module: str, names: list[str], indent: str) -> list[str]:
    one_line = f"{indent}from {module} import {', '.join(names)}"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    return [f"{indent}from {module} import (", *(f"{indent}    {n}," for n in names),
            f"{indent})"]


def swept_import(node: ast.ImportFrom, indent: str, where: str) -> tuple[list[str], set[str]]:
    """The lines that replace ``node``, and the old names to rename in the file's body."""
    module = node.module or ""
    by_module: dict[str, list[str]] = {}
    renames: set[str] = set()
    for alias in node.names:
        if module == "tests":  # ``from tests import custom_category``
            new_module = MODULES[f"tests.{alias.name}"]
            package, _, name = new_module.rpartition(".")
            keep = alias.asname or alias.name
            by_module.setdefault(package, []).append(name if keep == name else f"{name} as {keep}")
            continue
        new_module = target(module, alias.name, where)
        name = RENAMED.get(alias.name, alias.name)
        if alias.asname:
            name = f"{name} as {alias.asname}"
        elif alias.name in RENAMED:
            renames.add(alias.name)
        by_module.setdefault(new_module, []).append(name)
    lines = [line for m, names in by_module.items() for line in rendered(m, names, indent)]
    return lines, renames


def sweep_source(text: str, where: str) -> str:
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and needs_sweep(n)),
                   key=lambda n: -n.lineno)
    renames: set[str] = set()
    for node in nodes:
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        new, renamed = swept_import(node, indent, where)
        renames |= renamed
        lines[node.lineno - 1:node.end_lineno] = [line + "\n" for line in new]
    swept = "".join(lines)
    for old in renames:
        swept = re.sub(rf"\b{old}\b", RENAMED[old], swept)
    return swept


def sweep_prose(text: str) -> str:
    for old, new in PATHS.items():
        text = re.sub(rf"(?<![\w/]){re.escape(old)}", new, text)
    for old, new in MODULES.items():
        text = text.replace(f'"{old}"', f'"{new}"')  # pytest_plugins = ["tests.browser"]
    return text


def files() -> list[Path]:
    skip = {".git", ".venv", ".axe", "node_modules", "build", "__pycache__"}
    found = []
    for pattern in ("*.py", "*.md"):
        for path in ROOT.rglob(pattern):
            relative = path.relative_to(ROOT)
            if (skip.isdisjoint(relative.parts) and relative.name != "CHANGELOG.md"
                    and relative != Path(__file__).relative_to(ROOT)):
                found.append(path)
    return sorted(found)


def ruff() -> str | None:
    beside = Path(sys.executable).parent / "ruff"
    return str(beside) if beside.exists() else shutil.which("ruff")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    arguments = parser.parse_args()
    changed, unknown = [], []
    for path in files():
        text = path.read_text()
        new = sweep_prose(text)
        if path.suffix == ".py":
            try:
                new = sweep_source(new, str(path.relative_to(ROOT)))
            except Unknown as error:
                unknown.append(str(error))
                continue
        if new != text:
            changed.append(path)
            if not arguments.check:
                path.write_text(new)
    for message in unknown:
        print(message, file=sys.stderr)
    for path in sorted(ROOT.glob("tests/test_*.py")):
        if re.search(r"^\s*def app_config\(", path.read_text(), re.M):
            print(f"note: {path.relative_to(ROOT)} defines an app_config fixture; the suite "
                  "has one, read from an app_config mark (tests/conftest.py)", file=sys.stderr)
    for path in changed:
        print(("would sweep " if arguments.check else "swept ") + str(path.relative_to(ROOT)))
    python = [p for p in changed if p.suffix == ".py"]
    if python and not arguments.check and ruff():
        # Two old imports may now name one module; isort merges and orders them.
        subprocess.run([ruff(), "check", "--quiet", "--select", "I", "--fix",
                        *map(str, python)], cwd=ROOT, check=False)
    return 1 if unknown or (arguments.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
