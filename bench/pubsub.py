"""The live badge's Redis: what its keys weigh, and what telling one fan-out's readers costs
Redis and each web process.

Run from the repository root (Redis must be up)::

    python -m bench.pubsub            # 100,000 readers told
    python -m bench.pubsub --quick    # 20,000

Each web process's hub subscribes to the channel of everyone
(:class:`wikinotify.inbox.live.Hub`), where a fan-out tells each batch of 5,000 readers in
one message naming them (:func:`wikinotify.inbox.live.changed`), so each message reaches
every web process. Measured with wikinotify's own functions, on the Redis the tests use, per
reader told:

- the bytes (``MEMORY USAGE``) of a reader's summary version and "account loaded" keys
  (``live.summary_versions``), and of an account's stream places with one and five streams
  (``stream_places.take``);
- the bytes a reader told holds in the output buffer of a subscriber that does not read
  (``CLIENT LIST``'s ``omem`` of a subscriber on a raw socket): what Redis's
  ``client-output-buffer-limit pubsub`` counts, and so how many readers' news a web process
  may fall behind by before Redis drops its subscription;
- the readers per second one subscriber process takes with redis-py, as the hub does (each
  message parsed to its ids), beside the rate at which the fan-out tells them with no
  subscriber at all (the limit);
- the CPU time of Redis's one thread per reader told: Redis's own CPU seconds (``INFO
  cpu``), telling while one subscriber reads, and with no subscriber.

Redis's CPU time does not count the benchmark's processes waiting for a core, but whatever
another client asks of the same Redis meanwhile (another test run) adds to it; the
subscriber's rate moves with the machine's load, printed beside it. Keys and
channels are under a queue name of the benchmark's own and deleted after.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Flask
from redis import Redis

import demo
from bench import report
from wikinotify.inbox import live, stream_places
from wikinotify.pipeline.audience import CANDIDATE_BATCH

#: A queue name as long as the default one (``wikinotify``): the names of the keys and
#: channels, which it is part of, are part of what each weighs.
QUEUE = report.scoped("bench-psub")
#: Readers told per measurement: full, quick, and the smoke test's toy size.
FULL, QUICK, TINY = 100_000, 20_000, 5_000
#: Readers told before the output buffer is read: a batch at a time until Redis's
#: buffer holds some (at most this many), then :data:`BUFFER_SETTLE` more, which the
#: kernel's socket buffers (which grow on their own up to a few MB) no longer take.
BUFFER_WARMUP = 2_000_000
BUFFER_SETTLE = 50_000
READER_NAME = report.scoped("wikinotify-bench-pubsub-omem")


def build_app(redis_url: str) -> Flask:
    """The demo wiki's app: only its Redis and queue name are used here."""
    return demo.create_app({"SECRET_KEY": "bench-secret", "SQLALCHEMY_DATABASE_URI": "sqlite://",
                            "WIKINOTIFY_REDIS_URL": redis_url, "WIKINOTIFY_QUEUE": QUEUE})


def client(app: Flask) -> Redis:
    return Redis.from_url(app.config["WIKINOTIFY_REDIS_URL"])


# -- what each key weighs ------------------------------------------------------------------


@dataclass
class KeySizes:
    version: int
    account: int
    one_place: int
    five_places: int


def key_sizes(app: Flask) -> KeySizes:
    redis, user = client(app), "1234567"
    with app.app_context():
        live.summary_versions(app, [user], loaded=user)
        version_key = live.version_keys(app, user)[0]
        sizes = [redis.memory_usage(version_key), redis.memory_usage(live.account_key(app, user))]
        places = stream_places.places_key(app, user)
        for n in range(5):
            stream_places.take(app, user, stream_places.new_place(), limit=5)
            if n in (0, 4):
                sizes.append(redis.memory_usage(places))
    return KeySizes(*(int(size or 0) for size in sizes))


# -- publishing, and one subscriber reading ------------------------------------------------


def users(count: int) -> list[str]:
    """Ids as a wiki's (seven digits), a batch of the fan-out's size at a time."""
    return [str(1_000_000 + n) for n in range(count)]


@dataclass
class Published:
    seconds: float  # as the publisher saw it
    redis_us: float  # Redis's own CPU microseconds, per reader told


def redis_cpu(redis: Redis) -> float:
    """Redis's CPU seconds so far, its main thread's and any other's."""
    info = redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def publish(app: Flask, count: int, until: Callable[[], object] | None = None) -> Published:
    """Tell ``count`` readers as the fan-out does, then wait for ``until()`` (the
    subscriber to have read them), counting Redis's CPU until then."""
    ids, redis = users(count), client(app)
    cpu = redis_cpu(redis)
    start = time.perf_counter()
    for at in range(0, count, CANDIDATE_BATCH):
        live.changed(app, ids[at:at + CANDIDATE_BATCH])
    seconds = time.perf_counter() - start
    if until is not None:
        until()
    return Published(seconds=seconds, redis_us=(redis_cpu(redis) - cpu) / count * 1e6)


def read(url: str, channel: str, count: int, ready: multiprocessing.synchronize.Event,
         out: multiprocessing.Queue[float]) -> None:
    """A web process's subscription, as the hub reads it: every message taken, its ids
    parsed; the seconds from the first message to the last."""
    pubsub = Redis.from_url(url, socket_timeout=30).pubsub()
    pubsub.subscribe(channel)
    pubsub.get_message(timeout=5)  # the subscription's confirmation
    ready.set()
    first = None
    woken: set[str] = set()
    while len(woken) < count:
        message = pubsub.get_message(timeout=10)
        if message is None:
            break
        if message["type"] == "message":
            first = first or time.perf_counter()
            woken.update(json.loads(message["data"]))
    out.put(time.perf_counter() - first if first and len(woken) == count else 0.0)


@dataclass
class Reading:
    published: float  # readers/s told while no one subscribed (the limit)
    read: float  # readers/s one subscriber took
    redis: Published  # the publishing while it read


def reading(app: Flask, count: int, alone: Published) -> Reading:
    context = multiprocessing.get_context("spawn")
    ready, out = context.Event(), context.Queue()
    reader = context.Process(target=read, args=(
        app.config["WIKINOTIFY_REDIS_URL"], live.channel_prefix(app), count, ready, out))
    reader.start()
    try:
        if not ready.wait(60):
            sys.exit("the subscriber did not subscribe within a minute")
        seconds: list[float] = []
        published = publish(app, count, until=lambda: seconds.append(out.get(timeout=600)))
    finally:
        reader.join(timeout=60)
    if not seconds[0]:
        sys.exit("the subscriber did not hear of every reader (dropped by Redis?)")
    return Reading(published=count / alone.seconds, read=count / seconds[0], redis=published)


# -- what a reader told holds in a subscriber's output buffer -------------------------------


def _command(sock: socket.socket, *words: str) -> None:
    encoded = [word.encode() for word in words]
    sock.sendall(b"*%d\r\n" % len(encoded)
                 + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in encoded))


def _omem(redis: Redis) -> int:
    for entry in redis.client_list():
        if entry.get("name") == READER_NAME:
            return int(entry["omem"])
    sys.exit("the idle subscriber is gone (dropped by Redis?)")


def buffer_bytes(app: Flask, count: int) -> float:
    """Bytes per reader told in the output buffer of a subscriber that does not read."""
    url = urlsplit(app.config["WIKINOTIFY_REDIS_URL"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((url.hostname or "127.0.0.1", url.port or 6379))
    try:
        _command(sock, "CLIENT", "SETNAME", READER_NAME)
        _command(sock, "SUBSCRIBE", live.channel_prefix(app))
        time.sleep(0.5)
        redis = client(app)
        for _ in range(0, BUFFER_WARMUP, CANDIDATE_BATCH):
            publish(app, CANDIDATE_BATCH)
            if _omem(redis):
                break
        else:
            sys.exit(f"{BUFFER_WARMUP:,} readers told left nothing in the idle subscriber's "
                     "buffer")
        publish(app, BUFFER_SETTLE)
        before = _omem(redis)
        publish(app, count)
        return (_omem(redis) - before) / count
    finally:
        sock.close()


def pubsub_hard_limit(redis: Redis) -> int:
    """Bytes of output buffer after which Redis drops a subscriber (its hard limit)."""
    value = redis.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    words = value.split()
    return int(words[words.index("pubsub") + 1])


def clean(app: Flask) -> None:
    redis = client(app)
    keys = list(redis.scan_iter(match=f"wikinotify:{QUEUE}:*", count=1000))
    for at in range(0, len(keys), 1000):
        redis.delete(*keys[at:at + 1000])


# -- report ---------------------------------------------------------------------------------


def load() -> str:
    return "load average " + " ".join(f"{value:.1f}" for value in os.getloadavg())


def figures(keys: KeySizes, per_reader: float, limit: int, alone: Published,
            measured: Reading, count: int) -> list[report.Figure]:
    one = measured.redis
    name = f"{count:,} readers told"
    return [
        report.figure("pubsub", "a reader's summary version key", keys.version, "B"),
        report.figure("pubsub", "a reader's 'account loaded' key", keys.account, "B"),
        report.figure("pubsub", "an account's stream places, one stream", keys.one_place, "B"),
        report.figure("pubsub", "an account's stream places, five streams", keys.five_places,
                      "B"),
        report.figure("pubsub", "a reader told, in an idle subscriber's output buffer",
                      per_reader, "B"),
        report.figure("pubsub", "readers told a subscriber may fall behind by before Redis "
                      "drops it", limit / per_reader, "readers"),
        report.figure("pubsub", f"{name}, one subscriber process reading (redis-py; {load()})",
                      measured.read, "readers/s", measured.published,
                      "the fan-out's publishing to no subscriber"),
        report.figure("pubsub", f"{name}, Redis's CPU while one subscriber reads",
                      one.redis_us, "µs/reader", alone.redis_us, "with no subscriber"),
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.pubsub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 readers told")
    report.service_args(parser)
    return parser.parse_args(argv)


def measure_all(args: argparse.Namespace) -> list[report.Figure]:
    count = TINY if report.tiny() else QUICK if args.quick else FULL
    app = build_app(args.redis_url)
    try:
        keys = key_sizes(app)
        alone = publish(app, count)
        per_reader = buffer_bytes(app, count)
        limit = pubsub_hard_limit(client(app))
        measured = reading(app, count, alone)
    finally:
        clean(app)
    print(f"\nlive badge keys: summary version {keys.version} B, 'account loaded' {keys.account}"
          f" B, stream places {keys.one_place} B (one) / {keys.five_places} B (five)")
    print(f"a reader told, in an idle subscriber's output buffer: {per_reader:,.1f} B; the "
          f"pubsub hard limit, {limit:,} B, holds {limit / per_reader:,.0f} of them")
    one = measured.redis
    print(f"{count:,} readers told: Redis's CPU {alone.redis_us:.2f} µs a reader with no "
          f"subscriber, {one.redis_us:.2f} µs while one reads: "
          f"{one.redis_us - alone.redis_us:.2f} µs per reader delivered to a subscriber")
    print(f"one subscriber process heard of {measured.read:,.0f} readers/s; the fan-out "
          f"tells {measured.published:,.0f}/s with no subscriber ({load()})")
    return figures(keys, per_reader, limit, alone, measured, count)


def run(quick: bool) -> list[report.Figure]:
    """For ``python -m bench``."""
    return measure_all(parse_args(["--quick"] if quick else []))


def main(argv: Sequence[str] | None = None) -> int:
    print()
    print(report.table(measure_all(parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
