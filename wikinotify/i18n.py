"""Languages: wikinotify's catalogue, joined to the wiki's Flask-Babel set-up."""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import cache

from babel.messages.catalog import Message
from babel.messages.mofile import read_mo
from flask import Flask, current_app, has_request_context, request
from flask_babel import Babel

from .login import caller_id
from .state import state

#: wikinotify's own catalogues: ``translations/<lang>/LC_MESSAGES/messages.{po,mo}``.
TRANSLATIONS_DIR = os.path.join(os.path.dirname(__file__), "translations")
DOMAIN = "messages"
SOURCE_LANGUAGE = "en"
#: A msgid as a hashable key: a string, or a plural's (singular, plural) pair.
MessageKey = str | tuple[str, ...]


def _mo_path(directory: str, language: str) -> str:
    return os.path.join(directory, language, "LC_MESSAGES", f"{DOMAIN}.mo")


def available_languages() -> list[str]:
    found = [
        lang
        for lang in sorted(os.listdir(TRANSLATIONS_DIR))
        if os.path.exists(_mo_path(TRANSLATIONS_DIR, lang))
    ]
    return [SOURCE_LANGUAGE, *found]


def has_catalogue(language: str) -> bool:
    return language in available_languages()


def init_babel(app: Flask, languages: Iterable[str]) -> None:
    """Make wikinotify's strings translatable through the wiki's Flask-Babel.

    Flask-Babel merges the catalogues of every directory in its translation directories,
    so ours is appended there; the wiki's own strings and locale selector are untouched.
    When the wiki has no Flask-Babel yet, it is set up with :func:`select_locale`.
    """
    babel = app.extensions.get("babel")
    if babel is not None:
        if TRANSLATIONS_DIR not in babel.translation_directories:
            babel.translation_directories.append(TRANSLATIONS_DIR)
        return
    directories = app.config.get("BABEL_TRANSLATION_DIRECTORIES", "translations")
    if TRANSLATIONS_DIR not in directories.split(";"):
        app.config["BABEL_TRANSLATION_DIRECTORIES"] = f"{directories};{TRANSLATIONS_DIR}"
    Babel(app, locale_selector=select_locale)


def select_locale() -> str | None:
    """The viewer's own language, else the browser's, else the site's primary one."""
    languages = current_app.config["WIKINOTIFY_LANGUAGES"]
    host = state().host
    user_id = caller_id()
    if user_id is not None:
        locale = host.user_locale(user_id)
        if locale in languages:
            return locale
    if has_request_context():
        best = request.accept_languages.best_match(languages)
        if best:
            return best
        site = host.site(host.current_site_id())
        if site and site.primary_locale in languages:
            return site.primary_locale
    return SOURCE_LANGUAGE


def message_key(value: str | tuple[str, ...] | list[str]) -> MessageKey:
    """A msgid (or msgstr) as a hashable key: a plural pair is a tuple, whatever the
    reader returned it as."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _translated(message: Message) -> bool:
    strings = message.string if isinstance(message.string, list | tuple) else [message.string]
    return bool(message.id) and all(strings)


@cache
def _catalogue_msgids(path: str, mtime: float) -> frozenset[MessageKey]:
    with open(path, "rb") as handle:
        catalog = read_mo(handle)
    return frozenset(message_key(m.id) for m in catalog if _translated(m))


def translated_msgids(
    language: str, directories: Iterable[str] = (TRANSLATIONS_DIR,)
) -> set[MessageKey]:
    """Every msgid with a non-empty translation into ``language`` in ``directories``."""
    found: set[MessageKey] = set()
    for directory in directories:
        path = _mo_path(directory, language)
        if os.path.exists(path):
            found |= _catalogue_msgids(path, os.path.getmtime(path))
    return found


def translation_directories(app: Flask) -> list[str]:
    """Where the app's catalogues are: the wiki's directories and wikinotify's."""
    babel = app.extensions.get("babel")
    directories = babel.translation_directories if babel is not None else []
    return list(dict.fromkeys([*directories, TRANSLATIONS_DIR]))


def missing_translations(
    app: Flask, strings: Iterable[tuple[str, MessageKey]], languages: Iterable[str]
) -> list[tuple[str, str, MessageKey]]:
    """``(owner, language, msgid)`` for every string some language lacks.

    ``strings`` are ``(owner, msgid)`` pairs; the owner is named in the error.
    """
    directories = translation_directories(app)
    strings = list(strings)
    missing = []
    for language in languages:
        if language == SOURCE_LANGUAGE:
            continue
        known = translated_msgids(language, directories)
        missing += [(owner, language, msgid) for owner, msgid in strings if msgid not in known]
    return missing
