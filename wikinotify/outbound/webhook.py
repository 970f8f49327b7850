"""The webhook sender: one signed POST to the address the SSRF guard checked.

The URL is checked again here, at send time (a name may resolve elsewhere today), and the
request goes to the checked address, not to the name: httpx connects to the IP, sends the
name in ``Host``, and gives it to TLS as the SNI name that the certificate is checked
against, so HTTPS stays verified and there is no second DNS lookup to rebind. Redirects
are not followed (a redirect's target was never checked); proxies from the environment are
not used (the request must go where it was checked to go).

Timeouts: ``WIKINOTIFY_OUTBOUND_CONNECT_TIMEOUT`` (5 s) to connect, and
``WIKINOTIFY_OUTBOUND_TIMEOUT`` (15 s) for the rest: each read and write is bounded by it,
and reading the answer stops when it is spent. Only the first :data:`ANSWER_LIMIT` bytes of
an answer are read.
"""

from __future__ import annotations

import time

import httpx

from ..config import config
from ..models import Delivery, Endpoint, utcnow
from . import signing, ssrf
from .outcomes import Message, Outcome, blocked, from_status, unreachable

#: The most of a receiver's answer read (a verification's echo is far shorter).
ANSWER_LIMIT = 64 * 1024
USER_AGENT = "wikinotify-webhooks/1"


def send(endpoint: Endpoint, delivery: Delivery, message: Message) -> Outcome:
    """Sign ``message.body`` and POST it to ``endpoint``; the :class:`Outcome`."""
    if not endpoint.url:
        return blocked("the endpoint has no URL")
    try:
        target = ssrf.check(endpoint.url, allowed=ssrf.allowed())
    except ssrf.Blocked as refused:
        return blocked(refused.reason)
    now = utcnow()
    headers = {
        **signing.headers(delivery.message_id, now, message.body,
                          signing.signing_secrets(endpoint, now)),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Host": target.host_header,
    }
    return post(target, message.body, headers,
                connect_timeout=float(config("OUTBOUND_CONNECT_TIMEOUT")),
                timeout=float(config("OUTBOUND_TIMEOUT")))


def post(target: ssrf.Target, body: str, headers: dict[str, str], *,
         connect_timeout: float, timeout: float) -> Outcome:
    """POST ``body`` to ``target``'s checked address; never raises for what the network
    or the receiver did."""
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    limits = httpx.Timeout(timeout, connect=connect_timeout)
    try:
        with httpx.Client(timeout=limits, follow_redirects=False, trust_env=False) as client:
            request = client.build_request(
                "POST", target.connect_url, content=body.encode(), headers=headers,
                extensions={"sni_hostname": target.hostname},
            )
            response = client.send(request, stream=True)
            try:
                answer = _read(response, started + timeout)
            finally:
                response.close()
            return from_status(
                response.status_code, latency_ms=elapsed(),
                retry_after=response.headers.get("Retry-After"),
                location=response.headers.get("Location"), body=answer,
            )
    except httpx.ConnectTimeout:
        return unreachable(f"no connection within {connect_timeout:g} s", latency_ms=elapsed())
    except (httpx.TimeoutException, _Overtime):
        return unreachable(f"no answer within {timeout:g} s", latency_ms=elapsed())
    except httpx.ConnectError as error:
        return unreachable(f"could not connect: {_reason(error)}", latency_ms=elapsed())
    except httpx.TransportError as error:
        return unreachable(f"{type(error).__name__}: {_reason(error)}", latency_ms=elapsed())


class _Overtime(Exception):
    """The answer was still coming when the total timeout was spent."""


def _read(response: httpx.Response, deadline: float) -> bytes:
    answer = b""
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise _Overtime
        answer += chunk
        if len(answer) >= ANSWER_LIMIT:
            break
    return answer[:ANSWER_LIMIT]


def _reason(error: Exception) -> str:
    """The error's own words, e.g. "[Errno 111] Connection refused" (no URL in it)."""
    return (str(error) or type(error).__name__)[:200]
