"""A mail's HTML as a phone shows it (docs/channels.md#email): the real mails the real SMTP
server received (a real RQ worker, in this process, built and sent them), each drawn in a
headless chromium at 1280 and 390 px, in the light and the dark colour scheme, in every
language offered: nothing is wider than the screen, a long title included, and axe-core
finds nothing wrong. One app, one chromium, one tab for the module's one test."""

from __future__ import annotations

import pytest

from demo import wiki
from demo.models import User, db
from tests.helpers.browser import (
    AXE_MAIL_TAGS,
    LANGUAGES,
    SCREENS,
    axe_report,
    axe_violations,
    needs_chromium,
)
from tests.helpers.jobs import run_jobs
from tests.helpers.mail import bodies
from tests.helpers.wiki import edit, main_site, page, set_delay, user, watch

pytestmark = [needs_chromium, pytest.mark.app_config(smtp=True)]

#: A title with no place to break a line, as long as a wiki allows a word to be.
LONG_TITLE = "Onboarding" + "Checklist" * 8


@pytest.fixture
def database_url(tmp_path):
    """The browser tests exercise the mails, not the database: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'wiki.sqlite3'}"


def test_a_mail_fits_a_phone_and_passes_axe_light_and_dark_in_every_language(
        app, smtp, browser):
    """A one-entry mail with an excerpt (a mention), in each language (a reader per
    language), and a digest: each at every screen of SCREENS."""
    readers = {"en": "alice", "fr": "carol"}
    with app.app_context():
        set_delay(0)
        for language in LANGUAGES:
            if language not in readers:  # a reader of her own for each language offered
                readers[language] = f"reader_{language}"
                db.session.add(User(username=readers[language], locale=language,
                                    email=f"{readers[language]}@example.com",
                                    display_name=language, groups=list(user("alice").groups)))
                db.session.commit()
        wiki.save_page(main_site(), user("bob"), "handbook/onboarding", LONG_TITLE, "v2")
        for name in readers.values():
            watch("handbook/onboarding", name)
            watch("home", name)
        run_jobs(app)  # the edit: one mail each
        mentions = " ".join(f"@{name}" for name in readers.values())
        wiki.add_comment(page("handbook/onboarding"), user("bob"), f"{mentions} have a look")
        edit("home", "bob", "A change")  # with the mention: a digest each
        run_jobs(app)
    mails = {}
    for message in smtp.inbox.messages:
        language = next(lang for lang, name in readers.items()
                        if message["To"] == f"{name}@example.com")
        mails.setdefault(language, []).append(bodies(message)[1])
    assert set(mails) == set(LANGUAGES)
    # The digest quotes the mention's excerpt as its reader's language does.
    assert "\u201c@alice" in mails["en"][-1]
    assert "\u00ab\u202f@alice" in mails["fr"][-1]

    tab = browser.new_page()
    found = []
    for language, htmls in mails.items():
        for number, html in enumerate(htmls):
            for width, height, scheme in SCREENS:
                tab.set_viewport_size({"width": width, "height": height})
                tab.emulate_media(color_scheme=scheme)
                tab.set_content(html)
                where = f"{language} mail {number} at {width} px, {scheme}"
                assert tab.locator("html").get_attribute("lang") == language, where
                wide = tab.evaluate("document.documentElement.scrollWidth")
                if wide > width:
                    found.append(f"{where} is {wide} px wide")
                violations = axe_violations(tab, AXE_MAIL_TAGS)
                if violations:
                    found.append(f"axe on {where}:\n{axe_report(violations)}")
    tab.close()
    assert not found, "\n".join(found)
