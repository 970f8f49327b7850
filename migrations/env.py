"""Alembic environment for the demo wiki.

Its own tables are in versions/; wikinotify's are the ``wikinotify`` branch shipped in the
package, added as a second version location by ``wikinotify.migrations.init_app(app)``
(demo/__init__.py), which also keeps autogenerate off wikinotify's tables. So the target
metadata is the demo's alone, as in any wiki's env.py.
"""

import logging
from logging.config import fileConfig

from alembic import context
from flask import current_app

config = context.config
# Keep the loggers the app (and pytest) already set up.
fileConfig(config.config_file_name, disable_existing_loggers=False)
logger = logging.getLogger("alembic.env")


def get_engine():
    return current_app.extensions["migrate"].db.engine


config.set_main_option(
    "sqlalchemy.url", get_engine().url.render_as_string(hide_password=False).replace("%", "%%")
)
target_db = current_app.extensions["migrate"].db


def get_metadata():
    return target_db.metadata


def run_migrations_offline():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=get_metadata(),
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online():
    def process_revision_directives(context, revision, directives):
        # No empty revision when autogenerate finds nothing to do.
        if getattr(config.cmd_opts, "autogenerate", False):
            script = directives[0]
            if script.upgrade_ops.is_empty():
                directives[:] = []
                logger.info("No changes in schema detected.")

    conf_args = dict(current_app.extensions["migrate"].configure_args)
    conf_args.setdefault("process_revision_directives", process_revision_directives)
    engine = get_engine()
    # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
    conf_args.setdefault("render_as_batch", engine.dialect.name == "sqlite")
    conf_args.setdefault("compare_type", True)

    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=get_metadata(), **conf_args)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
