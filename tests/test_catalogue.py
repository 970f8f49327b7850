"""wikinotify's ``gettext`` and ``ngettext`` (:mod:`wikinotify.catalogue`) say what
Flask-Babel's say, in every language shipped, inside a mail's :func:`translating` block
(its catalogue held), in a request's :func:`held` block, and outside them (Flask-Babel's
own)."""

from __future__ import annotations

import re

import flask_babel
import pytest
from babel.messages.pofile import read_po

from wikinotify import catalogue
from wikinotify.i18n import TRANSLATIONS_DIR, available_languages

PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")
POT = f"{TRANSLATIONS_DIR}/messages.pot"


def _messages() -> list[str | tuple[str, str]]:
    with open(POT, "rb") as handle:
        return [m.id for m in read_po(handle) if m.id]


def _said(gettext, ngettext) -> list[str]:
    """Every string of the catalogue, its placeholders filled; plurals at 1, 2 and 5."""
    said = []
    for message in _messages():
        if isinstance(message, tuple):
            names = {n: 7 for n in PLACEHOLDER.findall(" ".join(message)) if n != "num"}
            said += [ngettext(*message, num, **names) for num in (1, 2, 5)]
        else:
            names = {n: 7 for n in PLACEHOLDER.findall(message)}
            said += [gettext(message, **names), gettext(message)]
    return said


@pytest.mark.parametrize("language", available_languages())
def test_a_mail_says_each_string_as_flask_babel_does(app, language):
    with app.app_context():
        with flask_babel.force_locale(language):
            expected = _said(flask_babel.gettext, flask_babel.ngettext)
        with catalogue.translating(language):
            said = _said(catalogue.gettext, catalogue.ngettext)
        assert said == expected
        if language != "en":
            english = _said(flask_babel.gettext, flask_babel.ngettext)
            assert said != english  # translated, not the source said again


@pytest.mark.parametrize("language", available_languages())
def test_a_request_holding_its_catalogue_says_each_string_as_flask_babel_does(app, language):
    """A page of the inbox holds the catalogue its request selected (:func:`held`)."""
    with app.test_request_context(), flask_babel.force_locale(language):
        expected = _said(flask_babel.gettext, flask_babel.ngettext)
        with catalogue.held() as translations:
            said = _said(catalogue.gettext, catalogue.ngettext)
        assert translations is flask_babel.get_translations()
    assert said == expected


def test_outside_a_mail_the_locale_is_flask_babels(app):
    with app.app_context(), flask_babel.force_locale("fr"):
        with catalogue.translating("de"):
            assert catalogue.gettext("Unsubscribe") == flask_babel.gettext("Unsubscribe")
            assert catalogue.gettext("Unsubscribe") != "Unsubscribe"
        # The block is over: Flask-Babel's selection (French here) again.
        assert catalogue.gettext("Unsubscribe") == flask_babel.gettext("Unsubscribe")
        assert catalogue.ngettext("%(num)d notification", "%(num)d notifications", 3) == (
            flask_babel.ngettext("%(num)d notification", "%(num)d notifications", 3))
