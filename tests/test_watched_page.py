"""The watched-page sentence (docs/rules.md#the-launch-categories, docs/rules.md#the-inbox-page): an
entry that absorbed several kinds of change says how many of each, "edited 3 times and moved
twice"."""

from __future__ import annotations

from itertools import combinations

import pytest
from flask import Flask
from flask_babel import Babel

from demo import wiki
from tests.helpers.jobs import run_jobs
from tests.helpers.web import login
from tests.helpers.wiki import edit, entries_for, page, user
from wikinotify.categories.base import EntryView
from wikinotify.categories.watched_page import describe

API = "/_notifications/api/notifications"

#: Every variant a watched page collects, in the order the sentence names them (edits
#: first, then the others in the order they came; here, this order).
VARIANTS = ("edited", "moved", "published", "unpublished", "scheduled", "deleted")
ONCE = {"edited": "edited", "moved": "moved", "published": "published",
        "unpublished": "unpublished", "scheduled": "given a publishing window",
        "deleted": "deleted"}
COMBINATIONS = [c for size in range(1, len(VARIANTS) + 1) for c in combinations(VARIANTS, size)]


@pytest.fixture(scope="module")
def english():
    app = Flask(__name__)
    Babel(app)
    with app.test_request_context():
        yield


def said(variant: str, num: int) -> str:
    return ONCE[variant] + {1: "", 2: " twice"}.get(num, f" {num} times")


def entry(counts: dict[str, int], stored: bool = True) -> EntryView:
    snapshot = {"variant_counts": counts} if stored else {}
    return EntryView(count=sum(counts.values()), variant=list(counts)[-1],
                     variants=tuple(counts), title="Runbook", actor="Bob", snapshot=snapshot)


@pytest.mark.parametrize("variants", COMBINATIONS, ids="+".join)
def test_every_combination_says_how_many_of_each(english, variants):
    # Once, twice and three times each, so every count's wording meets every neighbour.
    counts = {v: 1 + (n + len(variants)) % 3 for n, v in enumerate(variants)}
    parts = [said(v, n) for v, n in counts.items()]
    what = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    by = " by" if sum(counts.values()) == 1 else ", last by"
    assert describe(entry(counts)) == f"Runbook was {what}{by} Bob"


def test_three_edits_and_two_moves_read_edited_three_times_and_moved_twice(english):
    sentence = describe(entry({"edited": 3, "moved": 2}))
    assert sentence == "Runbook was edited 3 times and moved twice, last by Bob"


def test_edits_are_named_first_whatever_came_first(english):
    view = entry({"moved": 1, "edited": 2})
    assert describe(view) == "Runbook was edited twice and moved, last by Bob"


def test_an_entry_without_counts_takes_each_other_variant_as_once(english):
    """Entries written before the counts were kept: the edits are the rest."""
    view = entry({"edited": 3, "moved": 2}, stored=False)
    assert describe(view) == "Runbook was edited 4 times and moved, last by Bob"


def test_the_fan_out_counts_each_variant_of_a_coalesced_entry(app, client):
    with app.app_context():
        for n in range(3):
            edit("handbook/onboarding", "bob", f"Edit {n}")
        wiki.move_page(page("handbook/onboarding"), user("bob"), "handbook/welcome")
        wiki.move_page(page("handbook/welcome"), user("bob"), "handbook/onboarding")
    run_jobs(app)
    with app.app_context():
        [row] = entries_for("alice")
        assert (row.count, row.data["variant_counts"]) == (5, {"edited": 3, "moved": 2})
    login(client, "alice")
    [item] = client.get(API).get_json()["items"]
    assert item["text"] == "Onboarding was edited 3 times and moved twice, last by Bob Builder"
