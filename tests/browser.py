"""Browser fixtures: the demo wiki served on 127.0.0.1 and Debian's chromium, headless,
driven by Playwright (a downloaded browser cannot be installed here)."""

from __future__ import annotations

import os
import threading

import pytest
from werkzeug.serving import make_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"browser tests need Debian's chromium at {CHROMIUM} (./dev test installs it)",
)


@pytest.fixture
def live_url(app):
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


def sign_in(page, live_url, username="alice"):
    page.goto(f"{live_url}/login")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_url}/**")
