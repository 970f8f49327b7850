"""``WIKINOTIFY_BASE_TEMPLATE`` checked when the app can first load it: once both
``notify.init_app(app)`` has run and wikinotify's blueprint is registered (its own
``wikinotify/layout.html`` is found only then), whichever comes second. A template that is
missing, or that lacks a block wikinotify's pages fill, refuses to start: the pages would
otherwise fail, or show nothing, at their first request."""

from __future__ import annotations

from flask import Blueprint, Flask
from jinja2 import FileSystemLoader, TemplateNotFound, TemplateSyntaxError, nodes

from .config import BASE_TEMPLATE_BLOCKS as BLOCKS
from .config import ConfigError


def check(app: Flask, blueprint: Blueprint) -> None:
    """Refuse a base template the app cannot load, or one without :data:`BLOCKS`, once
    ``app`` has both wikinotify's settings and ``blueprint`` (wikinotify's)."""
    if "wikinotify" not in app.extensions or blueprint not in app.blueprints.values():
        return
    name = app.config["WIKINOTIFY_BASE_TEMPLATE"]
    try:
        defined = _blocks(app, name)
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
        raise ConfigError(
            f"WIKINOTIFY_BASE_TEMPLATE is {name!r}, which defines no block "
            f"{', '.join(lacking)}: wikinotify's pages fill the blocks {', '.join(BLOCKS)} "
            "and would show nothing of theirs. Add them to it (or to the template it "
            "extends)."
        )


def _blocks(app: Flask, name: str) -> set[str]:
    """The blocks ``name`` and the templates it extends define, as far as a literal
    ``{% extends %}`` leads (a computed one, or a tag this environment does not know yet,
    is taken on trust: every block)."""
    env = app.jinja_env
    defined: set[str] = set()
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        assert env.loader is not None  # Flask's environment always has one
        source = env.loader.get_source(env, name)[0]
        try:
            tree = env.parse(source)
        except TemplateSyntaxError:
            # Perhaps a tag of an extension the wiki adds later in its factory: its first
            # page view will say what is wrong, and the template is there.
            return set(BLOCKS)
        defined.update(block.name for block in tree.find_all(nodes.Block))
        parent = tree.find(nodes.Extends)
        if parent is None:
            break
        if not isinstance(parent.template, nodes.Const):
            return set(BLOCKS)
        name = parent.template.value
    return defined


def _folders(app: Flask) -> list[str]:
    """The folders Flask's loader looks in: the app's, then each blueprint's."""
    loaders = [app.jinja_loader, *(bp.jinja_loader for bp in app.iter_blueprints())]
    return [folder for loader in loaders if isinstance(loader, FileSystemLoader)
            for folder in loader.searchpath]
