"""``gettext`` and ``ngettext`` for wikinotify's own strings: Flask-Babel's, whose
catalogues and locale selection stay the one source of truth, but cheaper inside
:func:`translating` and :func:`held`.

Flask-Babel finds the catalogue again at every call (``g``, its context, the domain, the
selected locale, the cache of catalogues: 17 µs on this machine), and a digest of ten
entries says some thirty sentences, a page of the inbox sixty. :func:`translating` is
Flask-Babel's ``force_locale`` that also holds on to the catalogue it selects, for the
block; :func:`held` holds the one already selected (a request's). The functions here then
ask it directly, and format as Flask-Babel does. Outside such a block they are
Flask-Babel's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import flask_babel
from babel.support import NullTranslations

#: The catalogue of the locale a :func:`translating` block forced, while it runs.
_pinned: ContextVar[NullTranslations | None] = ContextVar("wikinotify_catalogue",
                                                         default=None)


@contextlib.contextmanager
def translating(locale: str) -> Iterator[NullTranslations]:
    """Flask-Babel's ``force_locale(locale)``, its catalogue held for the block (and
    given, for a template's callables)."""
    with flask_babel.force_locale(locale), held() as translations:
        yield translations


@contextlib.contextmanager
def held() -> Iterator[NullTranslations]:
    """The catalogue of the locale Flask-Babel selected (a request's), held for the block:
    a page of the inbox says some sixty sentences and times in one language."""
    translations = flask_babel.get_translations()
    token = _pinned.set(translations)
    try:
        yield translations
    finally:
        _pinned.reset(token)


def gettext(string: str, **variables: Any) -> str:
    """Flask-Babel's ``gettext``."""
    translations = _pinned.get()
    if translations is None:
        return flask_babel.gettext(string, **variables)
    text = translations.ugettext(string)
    return text % variables if variables else text


def ngettext(singular: str, plural: str, num: int, **variables: Any) -> str:
    """Flask-Babel's ``ngettext``: ``num`` is a variable too."""
    translations = _pinned.get()
    if translations is None:
        return flask_babel.ngettext(singular, plural, num, **variables)
    variables.setdefault("num", num)
    text = translations.ungettext(singular, plural, num)
    return text % variables if variables else text
