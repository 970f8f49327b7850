"""``WIKINOTIFY_BASE_TEMPLATE`` checked when the app can first load it: once both
``notify.init_app(app)`` has run and wikinotify's blueprint is registered (its own
``wikinotify/layout.html`` is found only then), whichever comes second. A template that is
missing, or whose chain of ``{% extends %}`` ends at a template that lacks a block
wikinotify's pages fill, refuses to start: the pages would otherwise fail, or show
nothing, at their first request."""

from __future__ import annotations

from flask import Blueprint, Flask
from jinja2 import Environment, FileSystemLoader, TemplateNotFound, TemplateSyntaxError, nodes

from .config import BASE_TEMPLATE_BLOCKS as BLOCKS
from .config import ConfigError


def check(app: Flask, blueprint: Blueprint) -> None:
    """Refuse a base template the app cannot load, or one whose chain of ``{% extends %}``
    ends at a template without :data:`BLOCKS`, once ``app`` has both wikinotify's settings
    and ``blueprint`` (wikinotify's)."""
    if "wikinotify" not in app.extensions or blueprint not in app.blueprints.values():
        return
    name = app.config["WIKINOTIFY_BASE_TEMPLATE"]
    env = _parsing_environment(app)
    try:
        root, defined = _root_blocks(env, name)
    except TemplateNotFound as missing:
        raise ConfigError(
            f"WIKINOTIFY_BASE_TEMPLATE is {name!r}, but the app has no template "
            f"{missing.name!r} (searched: {', '.join(_folders(app)) or 'no folder'}). Give "
            "the path of one of the wiki's templates, relative to a templates folder; a "
            "template in a blueprint's folder is found only once that blueprint is "
            "registered, so register it before wikinotify's blueprint."
        ) from None
    lacking = [block for block in BLOCKS if block not in defined]
    if lacking:
        where = ("which defines no block" if root == name else
                 f"whose chain of {{% extends %}} ends at {root!r}, which defines no block")
        raise ConfigError(
            f"WIKINOTIFY_BASE_TEMPLATE is {name!r}, {where} {', '.join(lacking)}: "
            f"wikinotify's pages fill the blocks {', '.join(BLOCKS)} and would show nothing "
            "of theirs. Add them to it (Jinja renders the blocks of the template at the "
            "root of the chain, the one that extends nothing)."
        )


def _parsing_environment(app: Flask) -> Environment:
    """An environment that finds and parses templates as the app's will: never
    ``app.jinja_env`` itself, which Flask builds once, from ``app.jinja_options`` as
    they are then, and the wiki may change them later in its factory."""
    return Environment(**{**app.jinja_options, "loader": app.create_global_jinja_loader()})


def _root_blocks(env: Environment, name: str) -> tuple[str, set[str]]:
    """The template at the root of ``name``'s chain of ``{% extends %}`` and the blocks it
    defines: the blocks Jinja renders. Taken on trust (every block), as far as the check
    cannot follow: a computed ``{% extends %}``, a parent not found (it may be in a
    blueprint registered later), a tag this environment does not know yet."""
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        assert env.loader is not None
        try:
            source = env.loader.get_source(env, name)[0]
        except TemplateNotFound:
            if len(seen) == 1:
                raise  # the named template itself must be there now
            return name, set(BLOCKS)
        try:
            tree = env.parse(source)
        except TemplateSyntaxError:
            # Perhaps a tag of an extension the wiki adds later in its factory: its first
            # page view will say what is wrong, and the template is there.
            return name, set(BLOCKS)
        parent = tree.find(nodes.Extends)
        if parent is None:
            return name, {block.name for block in tree.find_all(nodes.Block)}
        if not isinstance(parent.template, nodes.Const):
            return name, set(BLOCKS)
        name = parent.template.value
    return name, set(BLOCKS)  # a loop of extends: Jinja's own error, at the first page


def _folders(app: Flask) -> list[str]:
    """The folders Flask's loader looks in: the app's, then each blueprint's."""
    loaders = [app.jinja_loader, *(bp.jinja_loader for bp in app.iter_blueprints())]
    return [folder for loader in loaders if isinstance(loader, FileSystemLoader)
            for folder in loader.searchpath]
