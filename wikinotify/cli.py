"""``flask wikinotify new-category NAME``: a new notification category, written from a
template into the wiki's own package (docs/adopting.md#adding-a-kind-of-notification), so adding one
never means editing wikinotify.

The module it writes is a starting point that works as written: the category listens to
its event kind, tells the accounts holding a permission (``Host.accounts_with_permission``),
shows on administrators' preferences pages, coalesces on one field of the event and says
whether an entry about no page may be told to anyone (site-wide webhooks). The
command then prints the three steps that remain: register it, emit its kind, translate
its strings.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jinja2
from flask import Flask, current_app
from flask.cli import AppGroup

from .categories.base import (
    ALL_ORIGINS,
    EVENT_KIND,
    SCOPES,
    SECTIONS,
    CategoryError,
    check_event_kinds,
)
from .models import Origin
from .operator_cli import retry_command, status
from .state import state

wikinotify = AppGroup("wikinotify", help="wikinotify: notifications for this wiki.")
wikinotify.add_command(status)  # flask wikinotify status [--json]
wikinotify.add_command(retry_command)  # flask wikinotify retry KIND (ID... | --all)

#: A category key: a camelCase word, as the launch ones (``watchedPage``); it is also the
#: preference key and the prefix of its strings.
CATEGORY_KEY = re.compile(r"[a-z][a-zA-Z0-9]*")
#: The longest key the preferences and the inbox store (their ``category`` columns).
CATEGORY_KEY_LENGTH = 64
#: The event's own columns a group key may name; any other name is an extra of the emit.
EVENT_COLUMNS = ("page_id", "comment_id", "submission_id", "actor_id", "site_id")
#: Which of those say the event is about a page, whose readers alone may be told.
ABOUT_A_PAGE = ("page_id", "comment_id", "submission_id")
#: What a sentence may name: the snapshot's title and the actor.
SENTENCE_FIELDS = {"title": "Backup", "actor": "Alice"}

#: Its own environment, not the app's: the template is Python source, rendered outside any
#: request (it ships under templates/, which the wheel's package data already holds).
_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("wikinotify", "templates"),
    autoescape=False,  # Python source, not HTML: every value goes in through the py filter
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
# A string as a Python literal: JSON's string escapes are all valid Python ones.
_templates.filters["py"] = lambda value: json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class NewCategory:
    """What the template is filled with."""

    key: str
    events: tuple[str, ...]
    title: str
    description: str
    sentence: str
    priority: int
    in_app: bool
    email: bool
    section: str
    scope: str
    origins: tuple[str, ...]
    permission: str
    group_by: str
    told_to_anyone: bool

    @property
    def group_by_column(self) -> bool:
        return self.group_by in EVENT_COLUMNS

    @property
    def about_a_page(self) -> bool:
        return self.group_by in ABOUT_A_PAGE

    def render(self) -> str:
        return _templates.get_template("wikinotify/cli/category.py.jinja").render(c=self)


@wikinotify.command("new-category")
@click.argument("name")
@click.option("--event", "events", multiple=True, metavar="NOUN:VERB",
              help="An event kind it listens to (repeatable). Default: from NAME, "
                   "storageSyncFailed listens to storage:syncFailed.")
@click.option("--title", help="Its heading on the preferences page. Default: from NAME.")
@click.option("--description", help="The line under the heading. Default: the title.")
@click.option("--sentence", help="An entry's sentence; %(title)s is the snapshot's title, "
                                 "%(actor)s who acted. Default: 'TITLE: %(title)s'.")
@click.option("--priority", type=click.IntRange(0, 1000), default=15, show_default=True,
              help="Higher wins when one event reaches a person through two categories "
                   "(mention 40, watchedPage 20, pageCreated 5).")
@click.option("--in-app/--no-in-app", default=True, show_default=True,
              help="On by default in the inbox.")
@click.option("--email/--no-email", default=True, show_default=True,
              help="On by default by email.")
@click.option("--section", type=click.Choice(SECTIONS), default="everything",
              show_default=True, help="The preferences page heading it sits under.")
@click.option("--scope", type=click.Choice(sorted(SCOPES)), default="site", show_default=True,
              help="instance: its entries show on every site.")
@click.option("--origin", "origins", type=click.Choice(sorted(ALL_ORIGINS)), multiple=True,
              help="Origins it fires for (repeatable). Default: user.")
@click.option("--permission", default="manage:system", show_default=True,
              help="Who is told: the accounts holding this permission.")
@click.option("--group-by", default="page_id", show_default=True,
              help="The event field repeated events coalesce on: one of "
                   f"{', '.join(EVENT_COLUMNS)}, or an extra passed to emit (target_id).")
@click.option("--told-to-anyone/--not-told-to-anyone", default=False,
              show_default=True,
              help="Whether its entries may be told to anyone: the site-wide webhooks, "
                   "outside the wiki. One about a page goes to them only when a guest may "
                   "read it.")
@click.option("--directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write it. Default: the directory of the app's package.")
def new_category(name: str, events: tuple[str, ...], title: str | None,
                 description: str | None, sentence: str | None, directory: Path | None,
                 **options: Any) -> None:
    """Write the category NAME (a camelCase key, e.g. storageSyncFailed) as a module of
    the wiki's package, and print the steps that remain."""
    app = current_app
    _check_key(name, app)
    title = title or _words(name)
    category = NewCategory(
        key=name,
        events=events or (_default_event(name),),
        title=title,
        description=description or title + ".",
        sentence=_checked_sentence(sentence or f"{title}: %(title)s"),
        origins=options.pop("origins") or (Origin.USER.value,),
        group_by=_checked_field(options.pop("group_by")),
        **options,
    )
    try:
        check_event_kinds(f"notification category {name!r}", frozenset(category.events))
    except CategoryError as error:
        raise click.BadParameter(str(error), param_hint="'--event'") from None
    directory = directory or Path(app.root_path)
    path = directory / f"{_snake(name)}.py"
    try:
        with open(path, "x", encoding="utf-8") as module:
            module.write(category.render())
    except FileExistsError:
        raise click.ClickException(f"{path} exists already; it is left as it was.") from None
    click.echo(_next_steps(app, category, path))


def _check_key(name: str, app: Flask) -> None:
    if (
        not CATEGORY_KEY.fullmatch(name)
        or keyword.iskeyword(name)
        or len(name) > CATEGORY_KEY_LENGTH
    ):
        raise click.BadParameter(
            f"{name!r} is not a category key: give a camelCase word of at most "
            f"{CATEGORY_KEY_LENGTH} characters, such as storageSyncFailed",
            param_hint="'NAME'",
        )
    if name in state(app).registry:
        raise click.BadParameter(f"{name!r} is a category of this app already",
                                 param_hint="'NAME'")


def _camel_words(name: str) -> list[str]:
    return re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)


def _words(name: str) -> str:
    """``storageSyncFailed`` as ``Storage sync failed``."""
    return " ".join(_camel_words(name)).capitalize()


def _snake(name: str) -> str:
    """``storageSyncFailed`` as ``storage_sync_failed``, the module's name."""
    return "_".join(word.lower() for word in _camel_words(name))


def _default_event(name: str) -> str:
    """``storageSyncFailed`` listens to ``storage:syncFailed``
    (docs/adopting.md#adding-a-kind-of-notification)."""
    noun, *rest = _camel_words(name)
    if not rest:
        raise click.UsageError(
            f"{name} is one word, so its event kind cannot be guessed; "
            "give it with --event noun:verb"
        )
    kind = f"{noun}:{rest[0].lower()}{''.join(rest[1:])}"
    if not EVENT_KIND.fullmatch(kind):
        raise click.UsageError(f"give its event kind with --event noun:verb ({kind!r} is not one)")
    return kind


def _checked_sentence(sentence: str) -> str:
    try:
        sentence % SENTENCE_FIELDS
    except (KeyError, ValueError, TypeError) as error:
        raise click.BadParameter(
            f"{sentence!r} cannot be filled ({error!r}); it may name %(title)s and %(actor)s",
            param_hint="'--sentence'",
        ) from None
    return sentence


def _checked_field(field: str) -> str:
    if not field.isidentifier() or keyword.iskeyword(field):
        raise click.BadParameter(f"{field!r} is not a field name", param_hint="'--group-by'")
    return field


def _module_name(app: Flask, path: Path) -> str | None:
    """The dotted name ``path`` imports as, when it is inside the app's package."""
    module = sys.modules.get(app.import_name)
    is_package = module is not None and Path(getattr(module, "__file__", "")).stem == "__init__"
    package = app.import_name if is_package else app.import_name.rpartition(".")[0]
    try:
        relative = path.resolve().relative_to(Path(app.root_path).resolve())
    except ValueError:
        return None
    parts = [*filter(None, package.split(".")), *relative.with_suffix("").parts]
    return ".".join(parts)


def _next_steps(app: Flask, c: NewCategory, path: Path) -> str:
    module, alias = _module_name(app, path), _snake(c.key)
    package = module.rpartition(".")[0] if module else ""
    importing = f"from {package} import {alias}" if package else f"import {alias}"
    fields = ["site_id=None" if c.scope == "instance" else "site_id=site.id", "actor_id=user.id"]
    if c.about_a_page:
        fields.append("page_id=page.id")
    fields.append('snapshot={"title": ...}')
    if not c.group_by_column:
        fields.append(f"{c.group_by}=...")
    languages = [lang for lang in app.config["WIKINOTIFY_LANGUAGES"] if lang != "en"]
    return "\n".join([
        f"Wrote {path}: the category {c.key!r}, listening to {', '.join(c.events)}.",
        "Three steps remain:",
        f"  1. Register it ({module or path}):",
        f"       {importing}",
        f"       notify = WikiNotify(host=MyHost(), categories=[{alias}.category])",
        f"     or, after notify.init_app(app): notify.register_category({alias}.category, "
        "app=app)",
        f"  2. Emit {c.events[0]} where it happens, inside that transaction:",
        f"       notify.emit({json.dumps(c.events[0])}, {', '.join(fields)})",
        f"  3. Translate its strings into {', '.join(languages) or 'each language you offer'}: "
        "pybabel extract finds them (N_);",
        "     pybabel update and compile them into a translations directory listed in",
        "     BABEL_TRANSLATION_DIRECTORIES. Start-up refuses a category with one missing.",
    ])
