"""The documented webhook receiver works as printed: taken from docs/channels.md, served on
127.0.0.1, it answers its endpoint's verification, takes what the delivery engine sends
(verifying each signature) and refuses a request whose body was changed on the way."""

from __future__ import annotations

import os
import re
import threading
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from werkzeug.serving import make_server

from tests.helpers.app import ROOT
from tests.helpers.jobs import run_jobs
from tests.helpers.receiver import SHUTDOWN_POLL
from tests.helpers.smtp import free_port
from tests.helpers.web import login
from wikinotify.models import utcnow
from wikinotify.outbound import standard_webhooks

API = "/_notifications/api/webhooks"


pytestmark = pytest.mark.app_config(WIKINOTIFY_OUTBOUND_ALLOW=["127.0.0.1"])


def readme_receiver() -> str:
    """The first Python block of docs/channels.md's "Webhooks" section."""
    with open(os.path.join(ROOT, "docs", "channels.md"), encoding="utf-8") as handle:
        readme = handle.read()
    section = readme.split("\n## Webhooks\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_example_is_at_most_ten_lines():
    lines = [line for line in readme_receiver().splitlines() if line.strip()]
    assert len(lines) <= 10, lines


@pytest.fixture
def serve():
    """Serve a WSGI app on 127.0.0.1:``port`` in a thread, for the test's length."""
    servers = []

    def start(wsgi_app, port: int):
        server = make_server("127.0.0.1", port, wsgi_app, threaded=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL},
                         daemon=True).start()
        servers.append(server)

    yield start
    for server in servers:
        server.shutdown()


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_readme_receiver_verifies_and_answers(app, client, serve, capsys):
    port = free_port()
    url = f"http://127.0.0.1:{port}/hooks/wiki"
    login(client, "alice")
    created = client.post(API, json={"url": url, "categories": ["watchedPage"]}).get_json()

    # The documented code, with the secret the answer showed in place of the placeholder.
    code = readme_receiver().replace('"whsec_..."', repr(created["secret"]))
    namespace: dict = {"__name__": "readme_receiver"}
    exec(compile(code, "docs/channels.md", "exec"), namespace)
    serve(namespace["app"], port)

    run_jobs(app)  # the verification: the receiver echoes its challenge
    listed = client.get(API).get_json()["items"]
    assert listed[0]["state"] == "active"

    assert client.post(f"{API}/{created['id']}/test", json={}).status_code == 202
    run_jobs(app)
    newest = client.get(f"{API}/{created['id']}/deliveries").get_json()["items"][0]
    assert (newest["type"], newest["state"], newest["responseCode"]) == \
        ("webhook.test", "delivered", 204)
    assert "webhook.test" in capsys.readouterr().out

    # Signed for one body, sent with another, or signed ten minutes ago: refused (the
    # example lets the verifier's exception answer, a 500).
    body = b'{"type":"x","data":{"text":"t"}}'
    with app.app_context():
        now = utcnow()
        fresh = standard_webhooks.headers("msg_1", now, body.decode(), [created["secret"]])
        stale = standard_webhooks.headers("msg_2", now - timedelta(minutes=10), body.decode(),
                                [created["secret"]])
    assert post(url, body, fresh) == 204
    assert post(url, body.replace(b'"t"', b'"u"'), fresh) == 500
    assert post(url, body, stale) == 500
    assert post(url, body, {}) == 500
