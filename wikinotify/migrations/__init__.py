"""wikinotify's schema, shipped as an Alembic branch of its own (label ``wikinotify``).

A wiki that uses Flask-Migrate adds one line, after Flask-Migrate is set up::

    Migrate(app, db)
    wikinotify.migrations.init_app(app)

and its ordinary commands then look after wikinotify's tables:

- ``flask db upgrade`` applies wikinotify's revisions beside the wiki's own, now and after
  every wikinotify release. The two histories are two heads (the wiki's and wikinotify's),
  which Alembic upgrades only when told ``heads``; ``init_app`` makes that the default of
  the app's ``flask db upgrade``, ``stamp`` and ``show``. (In code, call
  ``flask_migrate.upgrade(revision="heads")``.)
- ``flask db migrate`` never proposes to create, alter or drop a ``wikinotify_*`` table
  (they are this branch's job), and bases the wiki's new revision on the wiki's own head,
  in the wiki's own versions folder.
- ``flask db downgrade wikinotify@base`` removes wikinotify's tables.

Writing wikinotify's next revision (for wikinotify's maintainers): autogenerate is not used
for this branch; each revision is written by hand.

- ``flask --app wsgi db revision -m "what and why" --head wikinotify@head`` writes an empty
  revision in ``versions/`` here, on top of the branch; fill in ``upgrade`` and
  ``downgrade``. Never import ``wikinotify.models`` in a revision: it is a snapshot, and the
  models will have moved on by the time it runs on someone's database.
- A partial index carries its predicate for both databases (``postgresql_where`` and
  ``sqlite_where``), as ``wikinotify.models.partial_index`` does; SQLite cannot ALTER most
  things, so a changed table goes through ``op.batch_alter_table``.
- An index on a table that may already be big (events, notifications) is built
  ``CONCURRENTLY`` on PostgreSQL, so that writes are not blocked while it builds; that
  cannot run inside a transaction::

      if op.get_context().dialect.name == "postgresql":
          with op.get_context().autocommit_block():
              op.create_index(name, table, columns, postgresql_concurrently=True, ...)
      else:
          op.create_index(name, table, columns, ...)

- tests/test_migrations.py checks that the branch alone builds exactly what
  ``wikinotify.models`` declares, partial-index predicates included.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from typing import Any

import click
from alembic.config import Config
from alembic.operations.ops import MigrationScript
from alembic.runtime.migration import MigrationContext
from flask import Flask
from sqlalchemy.schema import SchemaItem

#: wikinotify's revisions: the version location a wiki adds to its own.
VERSIONS = os.path.join(os.path.dirname(os.path.realpath(__file__)), "versions")
#: Every table wikinotify has, or ever had, is named so (wikinotify/models/).
TABLE_PREFIX = "wikinotify_"

#: What Flask-Migrate's own env.py logs when autogenerate finds nothing.
logger = logging.getLogger("alembic.env")

IncludeObject = Callable[[SchemaItem, str | None, str, bool, SchemaItem | None], bool]
RevisionDirectives = Callable[[MigrationContext, Any, list[MigrationScript]], None]

#: Alembic's names for ``path_separator`` values.
SEPARATORS = {"space": " ", "newline": "\n", "os": os.pathsep, ":": ":", ";": ";"}


def init_app(app: Flask) -> None:
    """Add wikinotify's branch to the app's Flask-Migrate set-up (see the module's
    docstring); call it after ``Migrate(app, db)`` or ``migrate.init_app(app, db)``."""
    state = app.extensions.get("migrate")
    if state is None:
        raise RuntimeError(
            "wikinotify.migrations.init_app(app) needs Flask-Migrate set up on the app first:"
            " call it after Migrate(app, db)."
        )
    if _add_versions not in state.migrate.configure_callbacks:
        state.migrate.configure(_add_versions)
    # Flask-Migrate hands these to env.py's context.configure().
    args = state.configure_args
    args["include_object"] = _without_wikinotify_tables(args.get("include_object"))
    args["process_revision_directives"] = _on_the_wikis_head(
        args.get("process_revision_directives")
    )
    _default_to_every_head(app, state.migrate.command)


def _add_versions(config: Config) -> Config:
    """Flask-Migrate's configure callback: wikinotify's revisions are a second version
    location, beside the wiki's own (``<migrations>/versions`` unless it set others)."""
    separator = config.get_main_option("path_separator") or config.get_main_option(
        "version_path_separator"
    )
    own = config.get_main_option("version_locations")
    if own is None:
        own = os.path.join(config.get_main_option("script_location") or "", "versions")
        if separator is None:
            # What Alembic recommends; without one it splits on spaces, and warns. Alembic
            # before 1.16 reads the second name.
            separator = "os"
            config.set_main_option("path_separator", separator)
            config.set_main_option("version_path_separator", separator)
    joint = SEPARATORS[separator] if separator else " "
    config.set_main_option("version_locations", (own + joint + VERSIONS).replace("%", "%%"))
    # `flask db revision` without --autogenerate runs env.py too, so the revision directives
    # below base it on the wiki's head.
    config.set_main_option("revision_environment", "true")
    return config


def _without_wikinotify_tables(previous: IncludeObject | None) -> IncludeObject:
    """Autogenerate's filter: nothing of a ``wikinotify_*`` table, in the database or in
    the wiki's metadata, then the wiki's own filter if it has one."""

    def include_object(
        item: SchemaItem, name: str | None, type_: str, reflected: bool,
        compare_to: SchemaItem | None,
    ) -> bool:
        table = name if type_ == "table" else getattr(getattr(item, "table", None), "name", "")
        if (table or "").startswith(TABLE_PREFIX):
            return False
        return previous is None or previous(item, name, type_, reflected, compare_to)

    return include_object


def _on_the_wikis_head(previous: RevisionDirectives | None) -> RevisionDirectives:
    """Base a new revision that names no head on the wiki's own head, in the wiki's own
    versions folder; then the wiki's own hook, or else Flask-Migrate's rule: no empty
    revision from autogenerate."""

    def process_revision_directives(
        context: MigrationContext, revision: Any, directives: list[MigrationScript]
    ) -> None:
        for script in directives:
            if script.head == "head":
                _base_on_the_wikis_head(context, script)
        if previous is not None:
            previous(context, revision, directives)
        elif _autogenerating(context) and all(
            ops.is_empty() for script in directives for ops in script.upgrade_ops_list
        ):
            directives[:] = []
            logger.info("No changes in schema detected.")

    return process_revision_directives


def _base_on_the_wikis_head(context: MigrationContext, script: MigrationScript) -> None:
    scripts = context.script
    if scripts is None:
        return
    revisions = [scripts.get_revision(head) for head in scripts.get_heads()]
    heads = [rev.revision for rev in revisions if rev is not None and not _is_ours(rev.path)]
    if len(heads) == 1:
        script.head = heads[0]
    elif not heads:
        # The wiki's first revision: a new base, in the wiki's folder, not in ours.
        script.head = "base"
        script.version_path = next(
            location for location in scripts.version_locations if not _is_ours(location)
        )
    # Several heads of the wiki's own: Alembic asks which, as it always does.


def _is_ours(path: str) -> bool:
    """Whether ``path`` (a revision's file or a version location) is in our folder."""
    return os.path.commonpath([os.path.realpath(path), VERSIONS]) == VERSIONS


def _autogenerating(context: MigrationContext) -> bool:
    options = context.config.cmd_opts if context.config is not None else None
    return bool(getattr(options, "autogenerate", False))


def _default_to_every_head(app: Flask, name: str) -> None:
    """The app's own copy of Flask-Migrate's ``db`` group, whose commands that target
    ``head`` by default (upgrade, stamp, show) target ``heads``: with wikinotify's branch
    beside the wiki's history there are two, and Alembic refuses ``head`` then."""
    group = app.cli.commands.get(name)
    if not isinstance(group, click.Group):
        return
    own = copy.copy(group)
    own.commands = {key: _every_head(command) for key, command in group.commands.items()}
    app.cli.add_command(own, name)


def _every_head(command: click.Command) -> click.Command:
    if not any(_targets_head(param) for param in command.params):
        return command
    own = copy.copy(command)
    own.params = [copy.copy(param) for param in command.params]
    for param in own.params:
        if _targets_head(param):
            param.default = "heads"
    return own


def _targets_head(param: click.Parameter) -> bool:
    return param.name == "revision" and param.default == "head"
