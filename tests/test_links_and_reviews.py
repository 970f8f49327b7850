"""Links land on what they announce, and reviewers answer suggestions
(docs/rules.md#the-inbox-page).

An entry about a comment links to that comment on the discussion, a review request to the
suggestion, in the API, on the inbox page and in the mail alike. A reviewer approves a
suggestion (the ``page:edit`` an approval emits: the reviewer is the actor, the snapshot
names the suggester, docs/rules.md#emit) or rejects it, and the suggester alone hears which
(``suggestionReviewed``). Every test runs on SQLite and on PostgreSQL, with real RQ jobs
and a real SMTP server.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import sqlalchemy as sa

from demo import wiki
from demo.host import DemoHost
from demo.models import Comment, Revision, Submission, db
from tests.helpers.jobs import run_jobs
from tests.helpers.web import csrf_token, login, login_with_csrf
from tests.helpers.wiki import entries_for, events, page, user
from wikinotify.categories import CategoryError, Registry, suggestion_reviewed

API = "/_notifications/api/notifications"
INBOX = "/_notifications/inbox"
ONBOARDING = "/pages/handbook/onboarding"
SITE = "http://localhost:5000"


pytestmark = [
    pytest.mark.app_config(smtp=True),
    pytest.mark.mail_delay(0),
]


def signed_in(client, name: str):
    client.post("/logout")
    login(client, name)
    return client


def mail_links(smtp, name: str) -> tuple[str, str]:
    """The text and HTML bodies of the one mail ``name`` was sent."""
    [mail] = [m for m in smtp.inbox.messages if m["To"] == f"{name}@example.com"]
    return mail.get_body(("plain",)).get_content(), mail.get_body(("html",)).get_content()


def assert_links_to(client, smtp, name: str, link: str) -> dict:
    """``name``'s one entry links to ``link`` in the API, on the inbox page and in the
    mail; returns the entry as the API shows it."""
    signed_in(client, name)
    [item] = client.get(API).get_json()["items"]
    assert item["url"] == link, name
    assert f'href="{link}"' in client.get(INBOX).get_data(as_text=True), name
    for body in mail_links(smtp, name):
        assert SITE + link in body, name
    return item


def suggestion_shown(html: str, submission_id: int) -> str:
    """The suggestion's element in the page's suggestions section."""
    section = re.search(r'<section id="suggest">.*?</section>', html, re.S).group(0)
    return re.search(rf'<article class="suggestion" id="suggestion-{submission_id}">.*?</article>',
                     section, re.S).group(0)


def suggestion_by_bob(content: str = "Day one: laptop, handbook, lunch.") -> Submission:
    return wiki.suggest(page("handbook/onboarding"), user("bob"), content)


# -- links -----------------------------------------------------------------------------------


def test_a_comment_a_reply_and_a_mention_each_link_to_the_comment_itself(ctx, client, smtp):
    question = db.session.scalar(sa.select(Comment).where(Comment.author_id == user("carol").id))
    reply = wiki.add_comment(page("handbook/onboarding"), user("bob"),
                             "In the cupboard; @admin has the key.", question.id)
    run_jobs(ctx)  # mail due at once is kicked by the fan-out
    link = f"{ONBOARDING}/comments#comment-{reply.id}"
    told = {"alice": "watchedPageComment", "carol": "commentReply", "admin": "mention"}
    for name, category in told.items():
        assert assert_links_to(client, smtp, name, link)["category"] == category
    # ... and the discussion has that anchor.
    html = client.get(f"{ONBOARDING}/comments").get_data(as_text=True)
    assert f'id="comment-{reply.id}"' in html


def test_a_coalesced_comment_entry_links_to_the_latest_comment(ctx, client, smtp):
    first = wiki.add_comment(page("handbook/onboarding"), user("bob"), "First")
    last = wiki.add_comment(page("handbook/onboarding"), user("bob"), "Second")
    run_jobs(ctx)
    [entry] = entries_for("alice")
    assert (entry.count, entry.comment_id) == (2, str(last.id)) and first.id != last.id
    signed_in(client, "alice")
    [item] = client.get(API).get_json()["items"]
    assert item["url"] == f"{ONBOARDING}/comments#comment-{last.id}"


def test_a_review_request_links_to_the_suggestion(ctx, client, smtp):
    submission = suggestion_by_bob()
    run_jobs(ctx)  # mail due at once is kicked by the fan-out
    link = f"{ONBOARDING}#suggestion-{submission.id}"
    for reviewer in ("carol", "admin"):
        assert assert_links_to(client, smtp, reviewer, link)["category"] == "reviewRequested"
    # The reviewer's page shows the suggestion at that anchor, with its two answers.
    html = client.get(ONBOARDING).get_data(as_text=True)
    shown = suggestion_shown(html, submission.id)
    assert "Day one: laptop, handbook, lunch." in shown
    assert f'action="/submissions/{submission.id}/approve"' in shown
    assert f'action="/submissions/{submission.id}/reject"' in shown


def test_a_hosts_default_links_put_the_anchor_in_place_of_a_section_fragment():
    host = DemoHost()
    snapshot = {"path": "handbook/on boarding"}
    assert host.comment_url(snapshot, "7") == "/pages/handbook/on%20boarding/comments#comment-7"
    # The demo's suggestions are "#suggest" on the page: the suggestion's anchor replaces it.
    assert host.suggestion_url(snapshot, "3") == "/pages/handbook/on%20boarding#suggestion-3"


def test_a_category_linking_to_a_part_no_host_has_is_refused_at_start_up():
    wrong = dataclasses.replace(suggestion_reviewed.category, variant_links={"rejected": "talk"})
    with pytest.raises(CategoryError, match="'suggestionReviewed' links to \\['talk'\\]"):
        Registry([wrong])


# -- approving and rejecting ---------------------------------------------------------------


def test_an_approval_is_the_reviewers_edit_and_the_suggester_hears_of_it(ctx, client, smtp):
    submission = suggestion_by_bob()
    run_jobs(ctx)
    response = signed_in(client, "carol").post(f"/submissions/{submission.id}/approve")
    assert response.status_code == 302 and response.headers["Location"] == ONBOARDING
    run_jobs(ctx)  # mail due at once is kicked by the fan-out

    db.session.expire_all()
    onboarding, carol = page("handbook/onboarding"), user("carol")
    assert onboarding.content == "Day one: laptop, handbook, lunch."
    latest = db.session.scalar(sa.select(Revision).where(Revision.page_id == onboarding.id)
                               .order_by(Revision.id.desc()).limit(1))
    assert latest.author_id == carol.id
    assert db.session.get(Submission, submission.id).status == "approved"

    # The suggester alone is told the outcome, and lands on the page it now is.
    item = assert_links_to(client, smtp, "bob", ONBOARDING)
    assert (item["category"], item["variant"]) == ("suggestionReviewed", "approved")
    assert item["text"] == "Carol Danvers approved your suggestion for Onboarding"
    assert item["actor"] == {"id": str(carol.id), "name": "Carol Danvers", "initials": "CD",
                             "avatarUrl": None}
    # Watchers hear of an ordinary edit, from the reviewer, naming who suggested it.
    [edited] = entries_for("alice")
    assert (edited.category, edited.variant, edited.actor_id) == (
        "watchedPage", "edited", str(carol.id))
    assert edited.data["suggested_by"] == "Bob Builder"
    assert edited.data["submission_id"] == str(submission.id)
    # The reviewer hears nothing of her own action; the other reviewer nothing new.
    assert [e.category for e in entries_for("carol")] == ["reviewRequested"]
    assert [e.category for e in entries_for("admin")] == ["reviewRequested"]
    assert "approved" in suggestion_shown(client.get(ONBOARDING).get_data(as_text=True),
                                          submission.id)


def test_a_rejection_changes_nothing_on_the_page_and_tells_the_suggester(ctx, client, smtp):
    before = page("handbook/onboarding").content
    submission = suggestion_by_bob()
    run_jobs(ctx)
    response = signed_in(client, "admin").post(f"/submissions/{submission.id}/reject")
    assert response.status_code == 302
    run_jobs(ctx)  # mail due at once is kicked by the fan-out

    db.session.expire_all()
    assert page("handbook/onboarding").content == before
    assert db.session.get(Submission, submission.id).status == "rejected"
    assert [e.kind for e in events()] == ["submission:new", "submission:review"]
    assert entries_for("alice") == []  # no edit, so nothing for the page's watchers
    link = f"{ONBOARDING}#suggestion-{submission.id}"
    item = assert_links_to(client, smtp, "bob", link)
    assert (item["category"], item["variant"]) == ("suggestionReviewed", "rejected")
    assert item["text"] == "Admin rejected your suggestion for Onboarding"
    # The link lands on the suggester's own, answered, suggestion.
    html = client.get(ONBOARDING).get_data(as_text=True)
    shown = suggestion_shown(html, submission.id)
    assert "rejected" in shown and "Day one: laptop, handbook, lunch." in shown


def test_the_answer_is_in_the_suggesters_language(ctx, client, smtp):
    """Carol reads French; a reviewer outside her group answers her suggestion."""
    submission = wiki.suggest(page("handbook/onboarding"), user("carol"), "Jour un")
    wiki.review_suggestion(submission, user("admin"), approve=False)
    run_jobs(ctx)
    signed_in(client, "carol")
    [item] = [i for i in client.get(API).get_json()["items"]
              if i["category"] == "suggestionReviewed"]
    assert item["text"] == "Admin a refusé votre proposition pour «\u202fOnboarding\u202f»"


def test_only_a_reviewer_may_answer_and_a_refusal_emits_nothing(ctx, client):
    content = page("handbook/onboarding").content
    submission = suggestion_by_bob()
    runbook = wiki.suggest(page("ops/runbook"), user("alice"), "Check the dashboards twice")
    before = [e.id for e in events()]
    # Readers of the page outside the reviewer group, the suggester among them: 403.
    for name in ("alice", "bob", "dave"):
        signed_in(client, name)
        for answer in ("approve", "reject"):
            assert client.post(f"/submissions/{submission.id}/{answer}").status_code == 403
    # A page the reader cannot see, or no such suggestion: 404, exactly alike.
    signed_in(client, "admin")
    assert client.post(f"/submissions/{runbook.id}/approve").status_code == 404
    assert client.post("/submissions/999999/approve").status_code == 404
    # A guest is sent to sign in.
    client.post("/logout")
    assert client.post(f"/submissions/{submission.id}/approve").status_code == 302

    db.session.expire_all()
    assert [e.id for e in events()] == before
    assert {s.status for s in db.session.scalars(sa.select(Submission))} == {"open"}
    assert page("handbook/onboarding").content == content


def test_an_answered_suggestion_cannot_be_answered_again(ctx, client):
    submission = suggestion_by_bob()
    signed_in(client, "carol")
    assert client.post(f"/submissions/{submission.id}/approve").status_code == 302
    told = [e.id for e in events()]
    for answer in ("approve", "reject"):
        response = client.post(f"/submissions/{submission.id}/{answer}")
        assert response.status_code == 400
        assert "already been answered" in response.get_data(as_text=True)
    db.session.expire_all()
    assert [e.id for e in events()] == told
    assert db.session.get(Submission, submission.id).status == "approved"
    # Suggesting again reopens the author's suggestion, and asks for a review afresh.
    wiki.suggest(page("handbook/onboarding"), user("bob"), "Another idea")
    assert events()[-1].kind == "submission:new"
    assert client.post(f"/submissions/{submission.id}/reject").status_code == 302


@pytest.mark.parametrize("app_config", [{"WTF_CSRF_ENABLED": True}])
def test_the_answer_forms_carry_their_token_and_a_post_without_one_is_refused(app, client):
    with app.app_context():
        submission_id = suggestion_by_bob().id
    login_with_csrf(client, "carol")
    html = client.get(ONBOARDING).get_data(as_text=True)
    approve = f"/submissions/{submission_id}/approve"
    assert client.post(approve).status_code == 400
    assert client.post(approve, data={"csrf_token": csrf_token(html)}).status_code == 302
    with app.app_context():
        assert db.session.get(Submission, submission_id).status == "approved"


def test_the_preferences_offer_the_new_category_on_by_default(ctx, client):
    signed_in(client, "bob")
    categories = client.get("/_notifications/api/preferences").get_json()["categories"]
    [answer] = [c for c in categories if c["key"] == "suggestionReviewed"]
    assert (answer["inApp"], answer["email"]) == (True, True)
    html = client.get("/_notifications/preferences").get_data(as_text=True)
    assert "Answers to your suggestions" in html
