"""The live streams one account holds open, counted across every web process in Redis
(``WIKINOTIFY_STREAM_PER_ACCOUNT``): one account must not take the threads that serve
everyone else.

An account's places are one sorted set, each member a stream's random id scored by when
its place lapses, on Redis's clock (one clock for every machine). An open stream renews
its place at each check (:data:`wikinotify.blueprint.stream.KEEPALIVE_SECONDS`) and gives
it back when it ends; the places of a process that died lapse after :data:`LEASE_SECONDS`.
"""

from __future__ import annotations

import secrets

from flask import Flask
from redis import Redis

from .queue import quick, redis_key

#: A place lapses this long after it was taken or last renewed. Well above the time
#: between two renewals (25 s): only a stream whose process died loses its place.
LEASE_SECONDS = 75

#: Drop the lapsed places of KEYS[1]; then, unless ARGV[2] (a limit, 0: none) are left,
#: take or renew the place ARGV[1] until ARGV[3] seconds from now. 1 if it holds one.
#: A script runs whole: two streams opening at once never both take the last place.
_TAKE = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if limit > 0 and redis.call('ZSCORE', KEYS[1], ARGV[1]) == false
   and redis.call('ZCARD', KEYS[1]) >= limit then
  return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(lease) + 1)
return 1
"""


def places_key(app: Flask, user_id: str) -> str:
    return redis_key(app, "streams", user_id)


def new_place() -> str:
    """A stream's id among its account's places."""
    return secrets.token_hex(8)


def take(app: Flask, user_id: str, place: str, *, limit: int,
         lease: float = LEASE_SECONDS) -> bool:
    """Whether ``user_id`` may hold the stream ``place``, now holding it: fewer than
    ``limit`` others hold a place (``limit=0``: renew, whatever the count). Raises what
    Redis raises (the stream then answers 503)."""
    def run(client: Redis) -> bool:
        script = client.register_script(_TAKE)
        return bool(script(keys=[places_key(app, user_id)], args=[place, limit, lease]))

    return quick(app, run)


def renew(app: Flask, user_id: str, place: str) -> None:
    """Keep the open stream's place (taken again if it lapsed while the process stalled)."""
    take(app, user_id, place, limit=0)


def give_back(app: Flask, user_id: str, place: str) -> None:
    quick(app, lambda client: client.zrem(places_key(app, user_id), place))
