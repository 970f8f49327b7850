"""The parts every outbound delivery stands on: the SSRF guard, secrets sealed at rest,
and Standard Webhooks signatures, checked by the library a receiver would use."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from wikinotify.config import ConfigError
from wikinotify.models import Endpoint
from wikinotify.outbound import secrets_box, ssrf, standard_webhooks

NONE_ALLOWED = ssrf.Allowed()


# -- the SSRF guard --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/hook", "loopback address 127.0.0.1"),
        ("http://10.0.0.5/hook", "private address 10.0.0.5"),
        ("http://172.16.3.4/hook", "private address 172.16.3.4"),
        ("http://192.168.1.1:8080/hook", "private address 192.168.1.1"),
        ("http://169.254.169.254/latest/meta-data/", "link-local address 169.254.169.254"),
        ("http://224.0.0.1/", "multicast address 224.0.0.1"),
        ("http://0.0.0.0/", "unspecified address 0.0.0.0"),
        ("http://100.64.0.1/", "shared (carrier-grade NAT) address 100.64.0.1"),
        ("http://[::1]/hook", "loopback address ::1"),
        ("http://[::]/hook", "unspecified address ::"),
        ("http://[fe80::1]/hook", "link-local address fe80::1"),
        ("http://[fc00::1]/hook", "private address fc00::1"),
        ("http://[ff02::1]/hook", "multicast address ff02::1"),
        # Deprecated site-local (RFC 3879), still routed inside some networks.
        ("http://[fec0::1]/hook", "site-local address fec0::1"),
        ("http://[feff::1]/hook", "site-local address feff::1"),
        # The kernel connects an IPv4-mapped address to the IPv4 one it carries.
        ("http://[::ffff:10.0.0.1]/hook", "private address 10.0.0.1"),
        ("http://[::ffff:169.254.169.254]/", "link-local address 169.254.169.254"),
        ("http://[::ffff:127.0.0.1]/", "loopback address 127.0.0.1"),
        # A name is judged by what it resolves to.
        ("http://localhost:8000/hook", "loopback address"),
    ],
)
def test_every_non_public_address_class_is_refused(url, reason):
    with pytest.raises(ssrf.Blocked) as refused:
        ssrf.check(url, allowed=NONE_ALLOWED)
    assert reason in refused.value.reason


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        # IANA's special-purpose registries, where ipaddress's tables are silent or wrong.
        ("192.0.0.8", "IETF protocol assignment address 192.0.0.8"),
        ("192.0.0.9", "IETF protocol assignment address 192.0.0.9"),
        ("192.88.99.1", "deprecated 6to4 relay address 192.88.99.1"),
        # Entries IANA marks globally reachable, which ipaddress calls global.
        ("192.31.196.1", "AS112 DNS sink address 192.31.196.1"),
        ("192.52.193.1", "AMT relay address 192.52.193.1"),
        ("192.175.48.1", "AS112 DNS sink address 192.175.48.1"),
        ("2620:4f:8000::1", "AS112 DNS sink address 2620:4f:8000::1"),
        ("192.0.2.1", "documentation address 192.0.2.1"),
        ("198.51.100.7", "documentation address 198.51.100.7"),
        ("203.0.113.9", "documentation address 203.0.113.9"),
        ("198.18.0.1", "benchmarking address 198.18.0.1"),
        ("198.19.255.1", "benchmarking address 198.19.255.1"),
        ("240.0.0.1", "reserved address 240.0.0.1"),
        ("255.255.255.255", "reserved address 255.255.255.255"),
        ("0.1.2.3", "'this network' address 0.1.2.3"),
        ("2001:db8::1", "documentation address 2001:db8::1"),
        ("3fff::1", "documentation address 3fff::1"),
        ("100::1", "discard-only address 100::1"),
        ("64:ff9b:1::1", "local-use translation address 64:ff9b:1::1"),
        ("2001:0:a00:2::f5ff:fffe", "Teredo address 2001:0:a00:2::f5ff:fffe"),
        ("4000::1", "reserved address 4000::1"),
        # NAT64 (RFC 6052) and 6to4 carry an IPv4 address, which is judged.
        ("64:ff9b::a00:1", "private address 10.0.0.1"),
        ("64:ff9b::7f00:1", "loopback address 127.0.0.1"),
        ("2002:a00:1::", "private address 10.0.0.1"),
    ],
)
def test_every_special_purpose_range_is_refused_whatever_ipaddress_says(address, reason):
    refused = ssrf.refusal(ipaddress.ip_address(address))
    assert refused is not None and refused.endswith(f" {reason}"), refused


@pytest.mark.parametrize(
    "address", ["93.184.215.14", "2606:4700::1111", "64:ff9b::5db8:d70e", "2002:5db8:d70e::1"]
)
def test_a_public_address_is_public_however_it_is_carried(address):
    assert ssrf.refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.org/x", "scheme ftp is not allowed"),
        ("file:///etc/passwd", "scheme file is not allowed"),
        ("gopher://example.org/", "scheme gopher is not allowed"),
        ("example.org/hook", "scheme (none) is not allowed"),
        ("http:///hook", "names no host"),
        ("http://user:pw@93.184.215.14/", "credentials in the URL"),
        ("http://93.184.215.14:99999/", "not a valid URL"),
        ("http://no-such-host.invalid/", "does not resolve"),
    ],
)
def test_urls_are_refused_before_any_request_with_a_reason(url, reason):
    with pytest.raises(ssrf.Blocked) as refused:
        ssrf.check(url, allowed=NONE_ALLOWED)
    assert reason in refused.value.reason


def test_a_name_that_does_not_resolve_is_unresolved_a_refusal_apart_from_an_address():
    # RFC 6761 reserves .invalid: it never resolves. A lookup that fails may pass (the
    # delivery is tried again); an address the guard refuses will not.
    with pytest.raises(ssrf.Unresolved) as failed:
        ssrf.check("http://no-such-host.invalid/", allowed=NONE_ALLOWED)
    assert failed.value.reason == "the name no-such-host.invalid does not resolve"
    with pytest.raises(ssrf.Blocked) as refused:
        ssrf.check("http://10.0.0.5/", allowed=NONE_ALLOWED)
    assert not isinstance(refused.value, ssrf.Unresolved)


def test_an_international_host_name_is_sent_idna_encoded():
    host, port = ssrf.parse("https://Bücher.example:8443/in")[1:3]
    assert (host, port) == ("xn--bcher-kva.example", 8443)
    allowed = ssrf.parse_allowed(["xn--bcher-kva.example"])
    assert allowed.refusal("xn--bcher-kva.example", ipaddress.ip_address("127.0.0.1")) is None
    with pytest.raises(ssrf.Blocked, match="not a valid host name"):
        ssrf.parse("http://ü" + "a" * 63 + ".example/")


def test_a_public_address_passes_and_the_target_names_the_checked_address():
    target = ssrf.check("https://93.184.215.14:8443/hooks/in?x=1", allowed=NONE_ALLOWED)
    assert target.address == "93.184.215.14"
    assert target.connect_url == "https://93.184.215.14:8443/hooks/in?x=1"
    assert target.host_header == "93.184.215.14:8443"


def test_a_public_ipv6_address_is_bracketed_in_the_url_it_connects_to():
    target = ssrf.check("http://[2606:4700::1111]/", allowed=NONE_ALLOWED)
    assert target.connect_url == "http://[2606:4700::1111]:80/"
    assert target.host_header == "[2606:4700::1111]"


def test_the_operator_allows_named_hosts_and_networks_and_nothing_else():
    allowed = ssrf.parse_allowed(["127.0.0.1", "10.1.0.0/16", "Chat.Internal."])
    assert ssrf.check("http://127.0.0.1:9/", allowed=allowed).address == "127.0.0.1"
    assert ssrf.check("http://10.1.2.3/", allowed=allowed).address == "10.1.2.3"
    with pytest.raises(ssrf.Blocked, match="private address 10.2.0.1"):
        ssrf.check("http://10.2.0.1/", allowed=allowed)
    # "localhost" is not 127.0.0.1 by name; what it resolves to may include ::1.
    assert allowed.admits("chat.internal", ipaddress.ip_address("10.9.9.9"))
    assert not allowed.admits("localhost", ipaddress.ip_address("::1"))


def test_a_name_resolving_to_loopback_passes_only_when_that_name_is_allowed():
    with pytest.raises(ssrf.Blocked, match="loopback"):
        ssrf.check("http://localhost:8000/", allowed=NONE_ALLOWED)
    allowed = ssrf.parse_allowed(["localhost"])
    target = ssrf.check("http://localhost:8000/", allowed=allowed)
    assert ipaddress.ip_address(target.address).is_loopback
    assert target.host_header == "localhost:8000"


@pytest.mark.parametrize("entry", ["not a host", "10.0.0.0/33", "", "exa_mple.org"])
def test_a_bad_allow_entry_is_a_start_up_error_naming_the_setting(entry):
    with pytest.raises(ConfigError, match="WIKINOTIFY_OUTBOUND_ALLOW"):
        ssrf.parse_allowed([entry])


def test_the_allow_setting_must_be_a_list():
    with pytest.raises(ConfigError, match="WIKINOTIFY_OUTBOUND_ALLOW must be a list"):
        ssrf.parse_allowed("127.0.0.1")


def test_the_wiki_refuses_to_start_with_a_bad_allow_entry(tmp_path):
    from tests.helpers.app import make_app

    with pytest.raises(ConfigError, match="WIKINOTIFY_OUTBOUND_ALLOW: 'bad host'"):
        make_app(f"sqlite:///{tmp_path}/x.db", WIKINOTIFY_OUTBOUND_ALLOW=["bad host"])


# -- secrets at rest -----------------------------------------------------------------------


def _app(**config) -> Flask:
    app = Flask(__name__)
    app.config.update(config)
    return app


def test_a_sealed_secret_is_not_its_plaintext_and_opens_again():
    app = _app(SECRET_KEY="instance secret")
    token = secrets_box.seal("tgram://bot-token/123", app)
    assert b"bot-token" not in token
    assert secrets_box.unseal(token, app) == "tgram://bot-token/123"


def test_a_rotated_instance_secret_keeps_old_rows_readable_through_its_fallbacks():
    old = secrets_box.seal("whsec_old", _app(SECRET_KEY="before"))
    rotated = _app(SECRET_KEY="after", SECRET_KEY_FALLBACKS=["before"])
    assert secrets_box.unseal(old, rotated) == "whsec_old"
    with pytest.raises(secrets_box.Unreadable):
        secrets_box.unseal(old, _app(SECRET_KEY="after"))


def test_without_a_secret_key_sealing_is_a_configuration_error_that_says_so():
    with pytest.raises(ConfigError, match="SECRET_KEY"):
        secrets_box.seal("x", _app())


# -- signatures ------------------------------------------------------------------------------


def _endpoint(app: Flask, secret: str, previous: str | None, until: datetime | None):
    return Endpoint(
        secret_encrypted=secrets_box.seal(secret, app),
        previous_secret_encrypted=secrets_box.seal(previous, app) if previous else None,
        previous_secret_until=until,
    )


def test_a_signed_body_verifies_with_the_standard_webhooks_library():
    secret = standard_webhooks.new_secret()
    assert secret.startswith("whsec_")
    body = '{"type": "pageEdited"}'
    now = datetime.now(UTC)
    headers = standard_webhooks.headers("msg_1", now, body, [secret])
    assert Webhook(secret).verify(body, headers) == {"type": "pageEdited"}
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("Edited", "Deleted"), headers)
    stale = standard_webhooks.headers("msg_1", now - timedelta(minutes=6), body, [secret])
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(body, stale)


def test_after_a_rotation_both_secrets_sign_for_24_hours_and_then_only_the_new_one():
    app = _app(SECRET_KEY="k")
    old, new = standard_webhooks.new_secret(), standard_webhooks.new_secret()
    now = datetime.now(UTC)
    endpoint = _endpoint(app, new, old, now + standard_webhooks.ROTATION_OVERLAP)
    body = "{}"
    with app.app_context():
        during = standard_webhooks.signing_secrets(endpoint, now)
        after = standard_webhooks.signing_secrets(endpoint,
                                                  now + standard_webhooks.ROTATION_OVERLAP)
    assert during == [new, old]
    headers = standard_webhooks.headers("msg_2", now, body, during)
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(body, headers)
    Webhook(new).verify(body, headers)
    assert after == [new]
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, standard_webhooks.headers("msg_3", now, body, after))


def test_the_rule_a_resolving_client_applies_is_the_same_rule():
    allowed = ssrf.parse_allowed(["127.0.0.1"])
    assert allowed.refusal("LOCALHOST.", ipaddress.ip_address("127.0.0.1")) is None
    reason = allowed.refusal("metadata", ipaddress.ip_address("169.254.169.254"))
    assert reason == "resolves to a link-local address 169.254.169.254"
