"""The live streams one account holds open, counted across every web process in Redis
(``WIKINOTIFY_STREAM_PER_ACCOUNT``): one account must not take the threads that serve
everyone else. Past the bound the account's oldest stream ends rather than the new one
being refused: a tab closed or a page left is noticed only at its stream's next write, and
a reader going from page to page must not be refused meanwhile.

An account's places are one sorted set, each member a stream's random id scored by when
its place lapses, on Redis's clock (one clock for every machine). Each process's hub renews
the places of its open streams every :data:`RENEW_SECONDS`, and a stream gives its place
back when it ends; the places of a process that died lapse after :data:`LEASE_SECONDS`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from flask import Flask
from redis import Redis

from ..queue import quick, redis_key

#: The hub renews every place its process holds this often (:class:`wikinotify.inbox.live.Hub`),
#: from its own thread: a stream whose thread blocks in a write keeps its place as long as
#: it keeps its thread.
RENEW_SECONDS = 25.0
#: A place lapses this long after it was taken or last renewed. Well above the time
#: between two renewals: only a stream whose process died loses its place.
LEASE_SECONDS = 3 * RENEW_SECONDS

#: Drop the lapsed places of KEYS[1]; then take or renew the place ARGV[1] until ARGV[3]
#: seconds from now. When ARGV[2] (a limit, 0: none) others already hold a place, the
#: one renewed longest ago goes (the oldest stream: the hub renews its places in the
#: order they were opened) and ARGV[5]..its id is published on the channel ARGV[4], which
#: ends that stream wherever it is; the script returns its id. A script runs whole: two
#: streams opening at once never leave the account above its limit. KEYS[2] holds every
#: account's places alike (their ids are random, so they never clash), for the count of
#: open streams the metrics read in one call (:func:`open_streams`); its lapsed places go
#: at each take, and it has no expiry (one account's short lease must not end the rest).
#: The lease rule, one place for both scripts: the Redis server's clock now, and a place
#: held until now + lease in its account's set (which lapses a second after its last
#: place) and in the set of all places.
_LEASE = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local function hold(key, all, place, lease)
  redis.call('ZADD', key, now + lease, place)
  redis.call('EXPIRE', key, math.ceil(lease) + 1)
  redis.call('ZADD', all, now + lease, place)
end
"""
_TAKE = _LEASE + """
local limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local ousted = false
if limit > 0 and redis.call('ZSCORE', KEYS[1], ARGV[1]) == false
   and redis.call('ZCARD', KEYS[1]) >= limit then
  ousted = redis.call('ZPOPMIN', KEYS[1])[1]
  redis.call('ZREM', KEYS[2], ousted)
  redis.call('PUBLISH', ARGV[4], ARGV[5] .. ousted)
end
hold(KEYS[1], KEYS[2], ARGV[1], lease)
return ousted
"""


def places_key(app: Flask, user_id: str) -> str:
    return redis_key(app, "streams", user_id)


def all_places_key(app: Flask) -> str:
    """Every account's places, in one set."""
    return redis_key(app, "open-streams")


def new_place() -> str:
    """A stream's id among its account's places."""
    return secrets.token_hex(8)


def take(app: Flask, user_id: str, place: str, *, limit: int, lease: float | None = None,
         channel: str = "", message: bytes = b"") -> str | None:
    """Hold the stream ``place`` for ``user_id``: when ``limit`` others hold a place
    (``limit=0``: no limit, a renewal), the oldest goes, told by ``message`` followed by
    its id on ``channel``; its id is returned. Raises what Redis raises (the stream then
    answers 503)."""
    def run(client: Redis) -> str | None:
        script = client.register_script(_TAKE)
        ousted = script(keys=[places_key(app, user_id), all_places_key(app)],
                        args=[place, limit, _lease(lease), channel, message])
        return ousted.decode() if ousted else None

    return quick(app, run)


def _lease(lease: float | None) -> float:
    return LEASE_SECONDS if lease is None else lease


#: :data:`_TAKE` with no limit, for many places: ARGV[3], ARGV[4] the first account and
#: place, and so on; ARGV[2]..account is the account's set. The keys are named in the
#: script, as :data:`wikinotify.inbox.live._TELL`'s are (only a Redis Cluster would need
#: them in KEYS, and RQ does not run on one).
_RENEW = _LEASE + """
local lease = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 3, #ARGV, 2 do
  local key = ARGV[2] .. ARGV[i]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  hold(key, KEYS[1], ARGV[i + 1], lease)
end
"""
#: Places renewed by one call of :data:`_RENEW` (Redis serves no one else meanwhile).
RENEW_PER_CALL = 1000


def renew(app: Flask, held: Sequence[tuple[str, str]]) -> None:
    """Keep the places ``held`` (account, place) of open streams, in one round trip (each
    taken again if it lapsed while the process stalled): a script call per
    :data:`RENEW_PER_CALL` places, where a call of :data:`_TAKE` each cost the hub's
    thread, which delivers the changes, a quarter second of Python for 3,000 streams
    (bench/live.py: a push that came meanwhile waited for it)."""
    def run(client: Redis) -> None:
        script = client.register_script(_RENEW)
        pipe = client.pipeline(transaction=False)
        prefix = places_key(app, "")
        for start in range(0, len(held), RENEW_PER_CALL):
            script(keys=[all_places_key(app)],
                   args=[_lease(None), prefix,
                         *(part for pair in held[start:start + RENEW_PER_CALL] for part in pair)],
                   client=pipe)
        pipe.execute()

    if held:
        quick(app, run)


def give_back(app: Flask, user_id: str, place: str) -> None:
    def run(client: Redis) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.zrem(places_key(app, user_id), place)
        pipe.zrem(all_places_key(app), place)
        pipe.execute()

    quick(app, run)


def open_streams(client: Redis, app: Flask) -> int:
    """Live streams open now across every web process: the places held and not lapsed,
    on Redis's clock. For the metrics' scrape; raises what Redis raises."""
    seconds, micros = client.time()
    return int(client.zcount(all_places_key(app), f"({seconds + micros / 1_000_000}", "+inf"))
