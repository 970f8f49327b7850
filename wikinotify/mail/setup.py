"""Whether notification mail can be sent, and why not (:func:`mail_problem`): the one
answer start-up, the preferences (docs/rules.md#the-launch-categories: email reads off
while mail cannot be sent), the mail job and Admin → Notifications give; and Flask-Mail
set up from the wiki's ``MAIL_*`` settings when the wiki has not (:func:`set_up_mail`)."""

from __future__ import annotations

from flask import Flask, current_app
from flask_mail import Mail

from ..categories.base import N_
from ..config import ConfigError

#: Why notification mail cannot be sent: :func:`mail_problem`'s answers, in English (the
#: logs, the status JSON); Admin → Notifications shows them translated.
MAIL_SWITCHED_OFF = N_("Notification mail is switched off: WIKINOTIFY_MAIL_ENABLED is False "
                       "in the wiki's config.")
NO_FLASK_MAIL = N_("Flask-Mail is not set up on the app: call Mail(app), or leave it to "
                   "notify.init_app(app), which sets it up from the MAIL_* settings.")
NO_SENDER = N_("Notification mail has no sender: set MAIL_DEFAULT_SENDER, the From address, "
               "in the wiki's config before Flask-Mail is set up (Mail(app), or "
               "notify.init_app(app)).")


def mail_problem(app: Flask | None = None) -> str | None:
    """Why notification mail cannot be sent from ``app``, and how to fix it; None when it
    can."""
    app = app or current_app
    if app.config["WIKINOTIFY_MAIL_ENABLED"] is False:
        return MAIL_SWITCHED_OFF
    mail = app.extensions.get("mail")
    if mail is None:
        return NO_FLASK_MAIL
    # What Flask-Mail read when it was set up is what a message's From will be.
    if not mail.default_sender:
        return NO_SENDER
    return None


def mail_configured(app: Flask | None = None) -> bool:
    """Whether notification mail can be sent at all (:func:`mail_problem` says why not)."""
    return mail_problem(app) is None


def set_up_mail(app: Flask) -> None:
    """Set Flask-Mail up from the wiki's ``MAIL_*`` settings if the wiki has not (a wiki
    that only sets them is sending mail, not silently nothing), and refuse
    ``WIKINOTIFY_MAIL_ENABLED = True`` while mail cannot be sent."""
    if "mail" not in app.extensions:
        Mail(app)
    problem = mail_problem(app)
    if app.config["WIKINOTIFY_MAIL_ENABLED"] and problem:
        raise ConfigError(f"WIKINOTIFY_MAIL_ENABLED is True, but mail cannot be sent. {problem}")
