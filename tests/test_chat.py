"""Chat through Apprise (docs/channels.md#chat), at the level of one message: Apprise's own ntfy
and Mattermost plugins deliver to a real local HTTP receiver; every address the send resolves
passes the SSRF guard; the answer Apprise got is kept for the retry classes; the target is
only ever shown masked."""

from __future__ import annotations

import ipaddress
import itertools
import json
import socket
import threading
import time

import pytest

from wikinotify.outbound import chat, ssrf


def loopback_allowed(host, address):
    return None if address == ipaddress.ip_address("127.0.0.1") else f"{address} refused"


def nothing_allowed(host, address):
    return f"{host} resolves to {address}, a loopback address"


def test_apprise_ntfy_plugin_delivers_to_its_topic(receiver):
    answer = chat.send(f"ntfy://127.0.0.1:{receiver.port}/wiki-alerts", title="Wiki",
                       body="Bob replied to you", refusal=loopback_allowed)
    assert answer.ok
    (request,) = receiver.requests
    assert json.loads(request.body) == {
        "topic": "wiki-alerts", "title": "Wiki", "message": "Bob replied to you"
    }


def test_an_address_the_guard_refuses_is_never_connected_to(receiver):
    answer = chat.send(f"ntfy://localhost:{receiver.port}/topic", title="t", body="b",
                       refusal=nothing_allowed)
    assert not answer.ok
    assert answer.blocked == "localhost resolves to 127.0.0.1, a loopback address"
    assert answer.status is None
    assert receiver.requests == []


def test_a_redirect_is_not_followed(receiver):
    receiver.answer("/", 302, headers={"Location": "http://169.254.169.254/latest/"})
    answer = chat.send(f"ntfy://127.0.0.1:{receiver.port}/topic", title="t", body="b",
                       refusal=loopback_allowed)
    assert not answer.ok and answer.status == 302 and answer.blocked is None
    assert [r.path for r in receiver.requests] == ["/"]


def test_the_answer_is_kept_for_the_retry_classes(receiver):
    receiver.answer("/", 429, headers={"Retry-After": "120"})
    answer = chat.send(f"ntfy://127.0.0.1:{receiver.port}/busy", title="t", body="b",
                       refusal=loopback_allowed)
    assert not answer.ok
    assert (answer.status, answer.retry_after) == (429, "120")
    assert "429" in answer.error


def test_the_guard_is_off_outside_a_send(receiver):
    chat.send(f"ntfy://127.0.0.1:{receiver.port}/topic", title="t", body="b",
              refusal=nothing_allowed)
    # The process's own lookups (the database's, Redis's) are not the guard's business.
    assert socket.getaddrinfo("localhost", 80)


@pytest.mark.parametrize(("url", "shown", "host"), [
    ("tgram://123456789:ABCdefGhIJKlmnOPQrstUVwxyz/12345", "tgram://…", None),
    ("ntfy://ntfy.example.org/secret-topic", "ntfy://ntfy.example.org/…", "ntfy.example.org"),
    ("ntfy://user:secret-pw@ntfy.example.org/t", "ntfy://ntfy.example.org/…", "ntfy.example.org"),
    ("ntfy://secret-topic", "ntfys://…", None),  # a topic on ntfy.sh
    ("ntfy://secret-topic/other", "ntfy://…", "secret-topic"),
    ("mmost://10.0.0.5/token", "mmost://10.0.0.5/…", "10.0.0.5"),
    ("mmost://[2001:db8::5]/token", "mmost://[2001:db8::5]/…", "2001:db8::5"),
    ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ", "slack://…", None),
    ("discord://1234567/abcdefghijk", "discord://…", None),
])
def test_a_target_is_shown_as_its_service_and_a_self_hosted_ones_host_only(url, shown, host):
    assert chat.hint(url) == shown
    assert chat.host_of(url) == host
    for secret in ("secret", "ABCdef", "1...z", "T...2", "1...7", "user"):
        assert secret not in chat.hint(url)


@pytest.mark.parametrize("url", ["", "   ", "https://", "nosuchservice://x/y", "x" * 2001])
def test_a_url_apprise_cannot_send_to_is_refused_with_a_reason(url):
    with pytest.raises(chat.InvalidChatTarget) as refused:
        chat.service(url)
    assert str(refused.value)


def test_a_target_is_checked_when_saved():
    local = ssrf.parse_allowed(["127.0.0.1"])
    assert chat.check_target("ntfy://127.0.0.1/alerts", local) == "ntfy://127.0.0.1/…"
    with pytest.raises(ssrf.Blocked, match="private address 10.0.0.5"):
        chat.check_target("gotify://10.0.0.5/token", local)
    with pytest.raises(ssrf.Blocked, match="loopback"):
        chat.check_target("ntfy://localhost/alerts", ssrf.parse_allowed([]))
    with pytest.raises(ssrf.Blocked, match="private address fd00::5"):
        chat.check_target("gotify://[fd00::5]/token", local)
    # A hosted service's URL holds tokens, not a host: only its form is checked.
    assert chat.check_target("tgram://123456789:ABCdefGhIJKlmnOPQrstUVwxyz/12345",
                             ssrf.parse_allowed([])) == "tgram://…"


def test_a_proxy_in_the_environment_cannot_carry_a_message_past_the_guard(
    receiver, monkeypatch
):
    """Through a proxy the guard would see only the proxy's name; chat sends direct."""
    monkeypatch.setenv("HTTP_PROXY", receiver.url())
    monkeypatch.setenv("http_proxy", receiver.url())
    answer = chat.send("ntfy://169.254.169.254/latest", title="t", body="b",
                       refusal=loopback_allowed)
    assert not answer.ok
    assert answer.blocked == "169.254.169.254 refused"
    assert receiver.requests == []


def test_a_failure_is_kept_without_the_targets_secrets(receiver):
    receiver.answer("/", 500)
    answer = chat.send(f"ntfy://127.0.0.1:{receiver.port}/SECRETTOPIC123", title="t",
                       body="b", refusal=loopback_allowed)
    assert not answer.ok and answer.status == 500
    assert "ntfy" in answer.error and "SECRETTOPIC123" not in answer.error


@pytest.mark.parametrize("url", [
    "rsyslog://syslog.example.org",
    "mailto://user:pass@example.org",
    "irc://nick@irc.example.org/%23wiki",
    "syslog://",
])
def test_a_service_that_opens_its_own_sockets_is_refused(url):
    """Only plugins that speak HTTP through requests, which the guard sees whole."""
    with pytest.raises(chat.InvalidChatTarget, match="not a chat service"):
        chat.service(url)


@pytest.fixture
def trickler():
    """A server that answers one byte every 0.3 s, for ever: each wait is short, the
    whole answer never ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                for byte in itertools.cycle(b"HTTP/1.1 200 OK\r\nX-Slow: yes"):
                    if stop.wait(0.3):
                        break
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    listener.close()


def test_a_service_that_answers_a_byte_at_a_time_is_given_up_at_the_deadline(trickler):
    chat.service("ntfy://ntfy.sh/topic")  # Apprise imported first: its import is not the send
    started = time.monotonic()
    answer = chat.send(f"ntfy://127.0.0.1:{trickler}/topic", title="t", body="b",
                       refusal=loopback_allowed, connect_timeout=1, timeout=1.5)
    assert time.monotonic() - started < 3
    assert not answer.ok and answer.status is None
    assert answer.error == "no answer within 1.5 s"


@pytest.mark.parametrize("trickled", ["head", "body"])
def test_a_send_given_up_at_its_deadline_ends_its_thread_and_connection(
    receiver, trickler, trickled
):
    """A service that trickles its answer (the head, or a body the send reads to its
    bound), never idle as long as the read timeout, holds nothing once the send is given
    up: every attempt would otherwise keep a thread and a socket for hours."""
    receiver.answer("/", 200, body_trickle=0.3, stream=100_000)
    port = trickler if trickled == "head" else receiver.port
    before = set(threading.enumerate())
    for _ in range(5):
        answer = chat.send(f"ntfy://127.0.0.1:{port}/topic", title="t", body="b",
                           refusal=loopback_allowed, connect_timeout=1, timeout=1)
        assert answer.error == "no answer within 1 s"
    # Each given-up send's thread ends within two seconds: looked for until then, rather
    # than looked at once after a fixed two seconds.
    deadline = time.monotonic() + 2
    while (left := [t for t in threading.enumerate()
                    if t not in before and t.name == "wikinotify-chat"]):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left == []


def test_a_slow_or_refusing_service_is_no_answer(receiver):
    receiver.answer("/", 200, delay=3)
    slow = chat.send(f"ntfy://127.0.0.1:{receiver.port}/slow", title="t", body="b",
                     refusal=loopback_allowed, connect_timeout=1, timeout=1)
    assert not slow.ok and slow.status is None
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the connection is refused
    refused = chat.send(f"ntfy://127.0.0.1:{port}/topic", title="t", body="b",
                        refusal=loopback_allowed, connect_timeout=1, timeout=1)
    assert not refused.ok and refused.status is None and refused.blocked is None


# -- what a target may say (docs/channels.md#chat) --------------------------------------------


@pytest.mark.parametrize("scheme", ["json", "jsons", "xml", "xmls", "form", "forms"])
def test_a_generic_http_target_is_refused_in_favour_of_a_verified_webhook(scheme):
    """A generic target posts to any URL with no proof the receiver wants it; a webhook
    is verified by a challenge first."""
    with pytest.raises(chat.InvalidChatTarget, match="add a webhook instead"):
        chat.service(f"{scheme}://93.184.215.14/hook")


@pytest.mark.parametrize(("url", "reason"), [
    ("ntfy://ntfy.example.org/topic?+X-Injected=yes", "+X-Injected"),
    ("mmost://chat.example.org/token?+Authorization=Bearer%20x", "+Authorization"),
    ("apprise://relay.example.org/token?+X-Injected=yes", "+X-Injected"),
    ("apprise://relay.example.org/token?-param=1", "-param"),
    ("discord://1234/abcd?:content=hi", ":content"),
    ("apprise://relay.example.org/token?method=form", "method"),
    ("ntfy://ntfy.example.org/topic?method=PUT", "method"),
])
def test_headers_payload_fields_and_methods_set_through_parameters_are_refused(url, reason):
    with pytest.raises(chat.InvalidChatTarget) as refused:
        chat.service(url)
    assert reason in str(refused.value)


@pytest.mark.parametrize(("url", "parameter"), [
    ("discord://1234/abcd?template=/etc/passwd", "template"),
    ("tgram://123456789:ABCdefGhIJKlmnOPQrstUVwxyz/12345?template=/etc/passwd", "template"),
    ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ?template=/etc/hostname",
     "template"),
    ("workflow://prod.westus.logic.azure.com:443/abc/def?template=/etc/passwd", "template"),
    ("fcm://my-project/device?keyfile=/etc/passwd", "keyfile"),
    ("ntfy://ntfy.example.org/topic?attach=file:///etc/passwd", "attach"),
])
def test_a_parameter_that_names_a_local_file_is_refused(url, parameter):
    with pytest.raises(chat.InvalidChatTarget) as refused:
        chat.service(url)
    assert f"{parameter}=" in str(refused.value)


@pytest.mark.parametrize("url", [
    "ntfy://ntfy.example.org/topic?redirect=yes",
    "ntfy://ntfy.example.org/topic?retry=100&wait=0",
    "ntfy://ntfy.example.org/topic?rto=3600",
    "ntfy://ntfy.example.org/topic?nosuchparameter=1",
])
def test_a_parameter_that_changes_how_requests_are_made_or_is_unknown_is_refused(url):
    with pytest.raises(chat.InvalidChatTarget, match="is not accepted"):
        chat.service(url)


@pytest.mark.parametrize("url", [
    "ntfy://ntfy.example.org/topic?priority=high&click=https://wiki.example.org/",
    "ntfy://ntfy.example.org/topic?token=tk_abc&format=markdown",
    "tgram://123456789:ABCdefGhIJKlmnOPQrstUVwxyz/?to=12345&silent=yes",
    "discord://1234/abcd?avatar_url=https://wiki.example.org/a.png&tts=no",
    "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ?footer=no",
    "mmost://chat.example.org/token?channel=wiki",
])
def test_parameters_that_only_shape_the_message_are_accepted(url):
    assert chat.service(url) is not None


@pytest.mark.parametrize("url", [
    "gotify://2130706433/token",
    "gotify://0x7f000001/token",
    "mmost://LOCALHOST/token",
    "ntfy://LOCALHOST/topic",
    "gotify://localhost./token",
    "gotify://[::1]/token",
    "gotify://[::ffff:127.0.0.1]/token",
    "matrix://user:pass@LOCALHOST/#room",
])
def test_loopback_in_every_written_form_is_refused_when_saved(url):
    with pytest.raises(ssrf.Blocked, match="loopback"):
        chat.check_target(url, ssrf.parse_allowed([]))


@pytest.mark.parametrize("url", ["mmost://0177.0.0.1/token", "gotify://127.1/token"])
def test_loopback_written_in_octal_or_short_is_no_host_apprise_accepts(url):
    with pytest.raises(chat.InvalidChatTarget, match="not a URL Apprise can send to"):
        chat.check_target(url, ssrf.parse_allowed([]))


def test_an_operator_allowed_address_is_admitted_however_it_is_written():
    local = ssrf.parse_allowed(["127.0.0.1"])
    assert chat.check_target("gotify://2130706433/token", local) == "gotify://2130706433/…"


HUNDRED_MB = 100 * 1024 * 1024


def test_a_huge_answer_is_read_only_up_to_the_bound(receiver, rss_growth):
    url = f"ntfy://127.0.0.1:{receiver.port}/topic"
    chat.send(url, title="t", body="b", refusal=loopback_allowed)  # Apprise loaded
    receiver.answer("/", 200, stream=HUNDRED_MB)
    with rss_growth() as grown:
        answer = chat.send(url, title="t", body="b", refusal=loopback_allowed)
    assert answer.ok and answer.status == 200
    assert grown() < 8 * 2**20, f"grew by {grown() / 2**20:.0f} MiB"
