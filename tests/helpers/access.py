"""A page one reader is told about, then locked away from her and retitled with what she
must never read: how the tests check that access is checked every time someone sees
something (docs/rules.md#lessons-learned)."""

from __future__ import annotations

from flask import current_app

from demo import wiki
from tests.helpers.jobs import run_jobs
from tests.helpers.wiki import entries_for, main_site, page, user, watch

SECRET_TITLE = "Acquisition of ACME Corp"
SECRET_PATH = "ops/acquisition"
EXCERPT = "Budget figures are in the shared drive"


def comment_told_to_carol() -> None:
    """bob comments on Onboarding, which carol and alice watch: both get an entry with
    the comment's excerpt."""
    watch("handbook/onboarding", "carol")
    wiki.add_comment(page("handbook/onboarding"), user("bob"), EXCERPT)
    run_jobs(current_app._get_current_object())
    assert [e.category for e in entries_for("carol")] == ["watchedPageComment"]


def lock_away_move_and_retitle() -> None:
    """An administrator moves the page under ops/ (Ops only: alice yes, carol no) and
    gives it a title carol must never read."""
    onboarding = page("handbook/onboarding")
    wiki.move_page(onboarding, user("admin"), SECRET_PATH)
    wiki.save_page(main_site(), user("admin"), SECRET_PATH, SECRET_TITLE, "Confidential.")
