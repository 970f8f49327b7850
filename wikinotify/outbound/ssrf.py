"""The SSRF guard: an outbound URL may reach only the public internet.

A URL is checked when it is saved and again before every delivery, after DNS
resolution: every address its host resolves to must be public, or the URL is refused
(:class:`Blocked`, with a reason a person can act on). The :class:`Target` that comes back
carries the address that was checked, and the request is made to that address, with the
original host in the ``Host`` header and in TLS's SNI and certificate check: there is no
second lookup, so a DNS answer that changes between check and connection (rebinding)
cannot swap in an internal address. Redirects are never followed.

``WIKINOTIFY_OUTBOUND_ALLOW`` names the exceptions, hostnames or IP networks an operator
trusts (an internal chat server, or 127.0.0.1 in the test suite). The default allows none.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Flask, current_app

from ..config import ConfigError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SETTING = "WIKINOTIFY_OUTBOUND_ALLOW"
SCHEMES = {"http": 80, "https": 443}
#: Seconds a DNS lookup may take: ``getaddrinfo`` has no timeout of its own.
RESOLVE_TIMEOUT = 5.0

# getaddrinfo blocks and cannot be interrupted; it runs on these threads so that the
# caller can stop waiting (a lookup that hangs keeps its thread until the resolver gives up).
_resolver = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")

#: Every reason the guard gives, as a ``str.format`` template: the owner reads it in the API's
#: English, and a page puts each in her language (wikinotify/refusals.py, which a test holds to
#: this list).
NOT_A_URL = "not a valid URL ({error})"
SCHEME_REFUSED = "scheme {scheme} is not allowed; use http or https"
NO_HOST = "the URL names no host"
CREDENTIALS = "credentials in the URL are not allowed"
NOT_A_HOST_NAME = "{name} is not a valid host name"
NOT_PUBLIC_ADDRESS = "resolves to {kind} address {address}"
UNRESOLVED_IN_TIME = "the name {hostname} did not resolve within {timeout:g} s"
UNRESOLVED = "the name {hostname} does not resolve"
REASONS = (NOT_A_URL, SCHEME_REFUSED, NO_HOST, CREDENTIALS, NOT_A_HOST_NAME, NOT_PUBLIC_ADDRESS,
           UNRESOLVED_IN_TIME, UNRESOLVED)
#: The kind :data:`NOT_PUBLIC_ADDRESS` names where :data:`NOT_PUBLIC` has no row.
NON_PUBLIC = "a non-public"


class Blocked(ValueError):
    """A URL the guard refuses; ``reason`` says why, for the owner and the delivery row."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unresolved(Blocked):
    """The host name did not resolve (or not in time). Refused when a URL is saved, like
    any :class:`Blocked`, but at send time a failing lookup may pass: the delivery is
    ``unreachable`` and tried again, where a refused address is final."""


@dataclass(frozen=True)
class Allowed:
    """The operator's exceptions (``WIKINOTIFY_OUTBOUND_ALLOW``), parsed."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    def admits(self, hostname: str, address: IPAddress) -> bool:
        return hostname in self.hosts or any(address in net for net in self.networks)

    def refusal(self, hostname: str, address: IPAddress) -> str | None:
        """Why a connection to ``address`` (resolved from ``hostname``) is refused, or
        ``None``: the guard's whole rule, for a client that resolves names itself (chat)."""
        name = hostname.strip("[]").lower().rstrip(".")
        return None if self.admits(name, address) else refusal(address)


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``address``) and who to say we are talking to."""

    url: str
    scheme: str
    #: The host as written (lower case), for the Host header, SNI and the certificate.
    hostname: str
    port: int
    #: The address that was checked: the only one the request may go to.
    address: str
    #: Path and query, as written.
    path: str

    @property
    def connect_url(self) -> str:
        """The URL with the checked address in place of the host name."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{host}:{self.port}{self.path}"

    @property
    def host_header(self) -> str:
        name = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return name if self.port == SCHEMES[self.scheme] else f"{name}:{self.port}"


def parse_allowed(entries: Iterable[str] | None) -> Allowed:
    """``WIKINOTIFY_OUTBOUND_ALLOW`` as an :class:`Allowed`; a bad entry is a
    :class:`ConfigError` naming the setting and the entry."""
    if isinstance(entries, str):
        raise ConfigError(f"{SETTING} must be a list of host names or networks, not a string")
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for entry in entries or ():
        text = str(entry).strip().lower().rstrip(".")
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
            continue
        except ValueError:
            pass
        label_ok = all(part and len(part) < 64 and part.replace("-", "").isalnum()
                       for part in text.split("."))
        if not text or not label_ok:
            raise ConfigError(
                f"{SETTING}: {entry!r} is neither a host name nor an IP address or network"
            )
        hosts.add(text)
    return Allowed(frozenset(hosts), tuple(networks))


def allowed(app: Flask | None = None) -> Allowed:
    """The app's exceptions, from its config."""
    return parse_allowed((app or current_app).config.get(SETTING))


def _table(*rows: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(network), kind) for network, kind in rows)


#: Where no request from the wiki may go, whatever the interpreter's own tables say: IANA's
#: IPv4 and IPv6 Special-Purpose Address Registries
#: (iana.org/assignments/iana-ipv4-special-registry, …/iana-ipv6-special-registry) and the
#: reserved and multicast blocks of its address space registries. A webhook or a chat
#: service lives on none of them, so even the entries IANA marks "globally reachable" (the
#: anycast services of 192.0.0.0/24, AS112's DNS sinks, AMT's relays), which ipaddress
#: calls global, are refused. The first matching row names the reason.
#: IPv4-mapped, NAT64 and 6to4 addresses are judged by the IPv4 address they carry, before
#: this table (:func:`_carried`).
NOT_PUBLIC = _table(
    ("0.0.0.0/32", "an unspecified"),                  # RFC 1122 section 3.2.1.3
    ("0.0.0.0/8", "a 'this network'"),                 # RFC 791
    ("10.0.0.0/8", "a private"),                       # RFC 1918
    ("100.64.0.0/10", "a shared (carrier-grade NAT)"), # RFC 6598
    ("127.0.0.0/8", "a loopback"),                     # RFC 1122 section 3.2.1.3
    ("169.254.0.0/16", "a link-local"),                # RFC 3927 (cloud metadata too)
    ("172.16.0.0/12", "a private"),                    # RFC 1918
    ("192.0.0.0/24", "an IETF protocol assignment"),   # RFC 6890 (192.0.0.8: RFC 7600)
    ("192.0.2.0/24", "a documentation"),               # RFC 5737 TEST-NET-1
    ("192.31.196.0/24", "an AS112 DNS sink"),          # RFC 7535 AS112-v4
    ("192.52.193.0/24", "an AMT relay"),               # RFC 7450 AMT
    ("192.88.99.0/24", "a deprecated 6to4 relay"),     # RFC 7526
    ("192.168.0.0/16", "a private"),                   # RFC 1918
    ("192.175.48.0/24", "an AS112 DNS sink"),          # RFC 7534 direct delegation
    ("198.18.0.0/15", "a benchmarking"),               # RFC 2544
    ("198.51.100.0/24", "a documentation"),            # RFC 5737 TEST-NET-2
    ("203.0.113.0/24", "a documentation"),             # RFC 5737 TEST-NET-3
    ("224.0.0.0/4", "a multicast"),                    # RFC 5771
    ("240.0.0.0/4", "a reserved"),                     # RFC 1112 section 4; 255.255.255.255 too
    ("::/128", "an unspecified"),                      # RFC 4291
    ("::1/128", "a loopback"),                         # RFC 4291
    ("64:ff9b:1::/48", "a local-use translation"),     # RFC 8215
    ("100::/64", "a discard-only"),                    # RFC 6666
    ("2001::/32", "a Teredo"),                         # RFC 4380: a tunnel, its client hidden
    ("2001::/23", "an IETF protocol assignment"),      # RFC 2928
    ("2001:db8::/32", "a documentation"),              # RFC 3849
    ("2620:4f:8000::/48", "an AS112 DNS sink"),        # RFC 7534 direct delegation
    ("3fff::/20", "a documentation"),                  # RFC 9637
    ("fc00::/7", "a private"),                         # RFC 4193 unique local
    ("fe80::/10", "a link-local"),                     # RFC 4291
    ("fec0::/10", "a site-local"),                     # RFC 3879: deprecated, still routed
    ("ff00::/8", "a multicast"),                       # RFC 4291
    # Everything outside 2000::/3, the only block IANA allocates as global unicast.
    ("::/3", "a reserved"),
    ("4000::/2", "a reserved"),
    ("8000::/1", "a reserved"),
)

#: NAT64's well-known prefix (RFC 6052): a translator connects to the IPv4 address in the
#: last 32 bits, as a DNS64 resolver writes a public name's address on an IPv6-only network.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _carried(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a connection to ``address`` really reaches, if it carries one:
    NAT64's, IPv4-mapped (::ffff:0:0/96, which the kernel connects as IPv4) or 6to4's
    (2002::/16, RFC 3056)."""
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.ipv4_mapped or address.sixtofour


def refusal(address: IPAddress) -> str | None:
    """Why ``address`` is no place for a request from the wiki, or ``None`` if public:
    :data:`NOT_PUBLIC`, then ipaddress's ``is_global`` (kept with the interpreter) for
    whatever that table may lack."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _carried(address)
        if embedded is not None:
            return refusal(embedded)
    for network, kind in NOT_PUBLIC:
        if address in network:
            return NOT_PUBLIC_ADDRESS.format(kind=kind, address=address)
    if not address.is_global:
        return NOT_PUBLIC_ADDRESS.format(kind=NON_PUBLIC, address=address)
    return None


def _resolve(hostname: str, port: int, timeout: float) -> list[IPAddress]:
    try:
        literal = ipaddress.ip_address(hostname)
    except ValueError:
        pass
    else:
        return [literal]
    future = _resolver.submit(socket.getaddrinfo, hostname, port, type=socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise Unresolved(UNRESOLVED_IN_TIME.format(hostname=hostname, timeout=timeout)) from None
    except (OSError, UnicodeError):
        raise Unresolved(UNRESOLVED.format(hostname=hostname)) from None
    # Scope ids (fe80::1%eth0) are dropped: a link-local address is refused anyway.
    found = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not found:
        raise Unresolved(UNRESOLVED.format(hostname=hostname))
    return list(dict.fromkeys(found))


def parse(url: str) -> tuple[str, str, int, str]:
    """``(scheme, hostname, port, path)`` of a URL the guard may consider, or
    :class:`Blocked` for one it refuses before any lookup."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise Blocked(NOT_A_URL.format(error=error)) from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Blocked(SCHEME_REFUSED.format(scheme=scheme or "(none)"))
    if not parts.hostname:
        raise Blocked(NO_HOST)
    if parts.username is not None or parts.password is not None:
        raise Blocked(CREDENTIALS)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, _ascii_host(parts.hostname), port or SCHEMES[scheme], path


def _ascii_host(hostname: str) -> str:
    """The host as it goes on the wire: an international name IDNA-encoded
    (``bücher.example`` → ``xn--bcher-kva.example``), for DNS, the Host header and SNI,
    which take ASCII only."""
    name = hostname.lower().rstrip(".")
    if name.isascii():
        return name
    try:
        return name.encode("idna").decode("ascii")
    except UnicodeError:
        raise Blocked(NOT_A_HOST_NAME.format(name=name)) from None


def check(url: str, *, allowed: Allowed, timeout: float = RESOLVE_TIMEOUT) -> Target:
    """Resolve ``url``'s host once and refuse it unless every address it resolves to is
    public or allowed; the :class:`Target` names the address to connect to."""
    scheme, hostname, port, path = parse(url)
    addresses = _resolve(hostname, port, timeout)
    for address in addresses:
        reason = allowed.refusal(hostname, address)
        if reason is not None:
            # Every address must pass, or one public record would vouch for a private one.
            raise Blocked(reason)
    return Target(url=url, scheme=scheme, hostname=hostname, port=port,
                  address=str(addresses[0]), path=path)
