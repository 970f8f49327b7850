"""Browser fixtures: the demo wiki served on 127.0.0.1 (by threads, or by another
process), its streams, and Debian's chromium, headless, driven by Playwright (a downloaded
browser cannot be installed here)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from werkzeug.serving import make_server

from tests.helpers.app import ROOT
from tests.helpers.jobs import worker_env
from tests.helpers.receiver import SHUTDOWN_POLL
from tests.helpers.smtp import free_port
from tests.helpers.sse import EventStream, PooledWSGIServer
from wikinotify.config import SETTINGS
from wikinotify.inbox import live

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"browser tests need Debian's chromium at {CHROMIUM} (./dev test installs it)",
)


#: axe-core from the npm registry, which ``./dev test`` installs (pinned) into tests/.axe.
AXE_JS = os.path.join(os.path.dirname(os.path.dirname(__file__)), ".axe", "node_modules",
                      "axe-core", "axe.min.js")
#: WCAG 2.1 A and AA, 2.2 AA (target size), and axe's best practices (landmarks, one main,
#: headings...).
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
#: Rules axe leaves off by default that wikinotify's pages must pass: target-size (WCAG 2.2
#: 2.5.8, every target at least 24×24 px).
AXE_RULES = {"target-size": {"enabled": True}}
#: What a mail is judged by: WCAG alone. axe's best practices for a page's structure (one
#: main landmark, a level-one heading, everything in landmarks) do not apply to a mail,
#: which its reader's mail client shows inside a page of its own.
AXE_MAIL_TAGS = [tag for tag in AXE_TAGS if tag != "best-practice"]


#: The languages wikinotify offers (``WIKINOTIFY_LANGUAGES``' default, which the demo wiki
#: keeps): a browser test of text runs in each, so a new catalogue is judged as it lands.
LANGUAGES: tuple[str, ...] = tuple(
    next(s.default for s in SETTINGS if s.key == "WIKINOTIFY_LANGUAGES"))
#: The screens a page is judged on (docs/adopting.md#themes): (width, height, colour
#: scheme), a desktop and a phone, each light and dark.
SCREENS = [(1280, 800, "light"), (1280, 800, "dark"), (390, 844, "light"), (390, 844, "dark")]


@contextmanager
def serving(app, threads: int | None = None) -> Iterator[str]:
    """``app`` served on 127.0.0.1 by a threaded werkzeug server (a thread per
    connection, or a pool of ``threads``); yields its base URL."""
    served = _files_read_whole(app)
    server = (make_server("127.0.0.1", 0, served, threaded=True) if threads is None
              else PooledWSGIServer("127.0.0.1", 0, served, threads))
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        _end_streams(app)
        server.shutdown()
        thread.join()


def _files_read_whole(app):
    """``app`` with a ``wsgi.file_wrapper`` that reads a sent file at once and closes it.

    werkzeug's server leaves a static file open when the browser drops the connection
    while it is sent (its clean-up reads the dropped socket, which raises before the
    file is closed); the ResourceWarning then fails whichever test collects the file (a
    CI run's did). The wiki's static files are a few kilobytes."""

    def read_whole(file, block_size: int = 8192) -> list[bytes]:
        with file:
            return [file.read()]

    def served(environ, start_response):
        environ["wsgi.file_wrapper"] = read_whole
        return app(environ, start_response)

    return served


def _end_streams(app, wait: float = 10.0) -> None:
    """End the streams the server still serves and wait for their threads to leave: a
    stream thread outliving its test would read the database at its next check, through
    the engine the test has disposed of, and leave that connection open."""
    hub = live.hub(app)
    hub.end_all()
    deadline = time.monotonic() + wait
    while hub.streams() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture(scope="session")
def playwright():
    """Playwright's driver, one for the test process: Playwright's sync API runs one at a
    time in a thread, so every browser of the process is launched through this one."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def chromium(playwright):
    """Debian's chromium, headless, one for the test process: launching it and its driver
    for each test took a second of wall time and 1.7 s of CPU. Tests are kept apart by
    contexts (cookies, storage, cache, permissions are each context's), which ``browser``
    closes after each test."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def live_url(app):
    with serving(app) as url:
        yield url


@pytest.fixture
def second_process_settings() -> dict[str, str]:
    """Extra ``FLASK_*`` variables for ``second_web_process``; override in a module."""
    return {}


@pytest.fixture
def second_web_process(app, second_process_settings):
    """The same wiki served by another process (``flask run``), as a second machine would."""
    port = free_port()
    env = {**worker_env(app), "FLASK_WTF_CSRF_ENABLED": "false", **second_process_settings}
    process = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "wsgi", "run", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/login", timeout=1):
                break
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None, "no second server"
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def streams():
    """Opens ``GET /stream`` (:class:`tests.sse.EventStream`); closed after the test."""
    opened: list[EventStream] = []

    def open_stream(*args, **kwargs) -> EventStream:
        opened.append(EventStream(*args, **kwargs))
        return opened[-1]

    yield open_stream
    for one in opened:
        one.close()


@pytest.fixture
def browser(chromium):
    """The process's chromium; every context the test opened (``new_page`` opens one) is
    closed after it, so no page of it outlives its test (an open page's stream would go
    on reconnecting to the server the test stopped, or to whatever took its port next)."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def sign_in(page, live_url, username="alice"):
    page.goto(f"{live_url}/login")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_url}/**")


def axe_violations(page, tags: list[str] = AXE_TAGS) -> list[dict]:
    """What axe-core finds wrong with the page as it stands (WCAG 2.1 A/AA and best
    practice), injected into the page; skips the test when ./dev test has not installed it."""
    if not os.path.exists(AXE_JS):
        pytest.skip(f"axe-core is not installed at {AXE_JS} (./dev test installs it with npm)")
    if not page.evaluate("typeof axe !== 'undefined'"):  # once per document
        page.add_script_tag(path=AXE_JS)
    return page.evaluate(
        "([tags, rules]) => axe.run(document, {runOnly: {type: 'tag', values: tags}, rules})"
        ".then(results => results.violations)",
        [tags, AXE_RULES],
    )


def axe_report(violations: list[dict]) -> str:
    """One readable line per violation, then each offending node's selector and summary."""
    lines = []
    for violation in violations:
        lines.append(f"{violation['id']} ({violation['impact']}): {violation['help']}")
        for node in violation["nodes"]:
            summary = " ".join((node.get("failureSummary") or "").split())
            lines.append(f"    {' > '.join(map(str, node['target']))}: {summary}")
    return "\n".join(lines)


#: wikinotify's controls under 24×24 px (WCAG 2.2 2.5.8, without axe's spacing exception,
#: which 21 px buttons passed); a control inside its <label> is the label's size.
SMALL_TARGETS = """[...document.querySelectorAll(
  ':is(.wn-inbox, .wn-preferences, .wn-admin, .wn-webhooks, .wn-deliveries, .wn-unsubscribe,'
  + ' .wn-menu:not([hidden]), .wn-bell) :is(button, select, input:not([type=hidden]), .wn-badge)')]
  .map(e => [e, (e.closest('label') || e).getBoundingClientRect()])
  .filter(([e, r]) => r.width && (r.width < 24 || r.height < 24))
  .map(([e, r]) => `${e.outerHTML.slice(0, 60)} ${Math.round(r.width)}×${Math.round(r.height)}`)"""



def expect_no_violations(tab, language: str) -> None:
    """axe finds nothing on any of the SCREENS, and nothing is wider than the screen; the
    tab is left on the first."""
    assert tab.locator("html").get_attribute("lang") == language  # the page is in it
    found = []
    for width, height, scheme in SCREENS:
        tab.set_viewport_size({"width": width, "height": height})
        tab.emulate_media(color_scheme=scheme)
        violations = axe_violations(tab)
        if violations:
            found.append(f"axe on {tab.url} at {width} px, {scheme}:\n{axe_report(violations)}")
        small = tab.evaluate(SMALL_TARGETS)
        if small:
            found.append(f"{tab.url} at {width} px has targets under 24×24 px: {small}")
        wide = tab.evaluate("document.documentElement.scrollWidth")
        if wide > width:  # the reader would have to scroll sideways
            found.append(f"{tab.url} is {wide} px wide at {width} px")
    tab.set_viewport_size({"width": SCREENS[0][0], "height": SCREENS[0][1]})
    tab.emulate_media(color_scheme=SCREENS[0][2])
    assert not found, "\n".join(found)
