"""Where an open stream's bytes are: one gevent worker, its memory by layer at two
numbers of open streams, the difference over the streams between them.

    flock /work/wt/bench.lock .venv/bin/python -m bench.stream_memory --streams 1000,3000

Served as ``bench/live.py`` serves (gunicorn's gevent worker, the README's line) but by
one worker, whose route ``/bench/memory`` (``bench/memory_app.py``) answers: its
resident memory, glibc's heap (``mallinfo2``), Python's allocator
(``sys._debugmallocstats``), the greenlets' saved stacks, objects by type and their
bytes, the frames a stream waits under, with ``--held TYPE`` what holds one object of
that type (a stream's, referrer by referrer), and with ``--tracemalloc``, what grew by
traceback. The first number's streams carry what is
made once (the hub, the pools, the code's first runs); the difference from there to the
second is what each further stream costs. ``--trim`` also says what ``malloc_trim``
would give back at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from collections.abc import Sequence

from bench import report as figures
from bench.live import (
    StreamClient,
    free_port,
    get,
    raise_file_limit,
    session_cookies,
    set_up,
    start_gunicorn,
)

MEMORY = "/bench/memory"


def read(port: int, **query: str) -> dict:
    path = MEMORY + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def flat(taken: dict) -> dict[str, float]:
    values: dict[str, float] = {}
    for group in ("status", "mappings", "malloc", "obmalloc"):
        for name, value in taken[group].items():
            values[f"{group}.{name}"] = value
    for name in ("allocated_blocks", "greenlets", "greenlet_stacks", "traced"):
        if name in taken:
            values[name] = taken[name]
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1000,3000",
                        help="the two numbers of open streams (default 1000,3000)")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="trace the worker's allocations, this many frames deep")
    parser.add_argument("--trim", action="store_true",
                        help="at the end, malloc_trim(0) and read again")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="in the worker's environment (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--held", action="append", default=[], metavar="TYPE",
                        help="at the end, what holds one object of TYPE (module.Qualname), "
                             "referrer by referrer")
    figures.service_args(parser)
    args = parser.parse_args(argv)
    low, high = (int(n) for n in args.streams.split(","))
    args.streams = high
    raise_file_limit()
    app, url, bench = set_up(args)
    env = dict(pair.split("=", 1) for pair in args.env)
    if args.tracemalloc:
        env["PYTHONTRACEMALLOC"] = str(args.tracemalloc)
    port = free_port()
    server = start_gunicorn(url, args.redis_url, port, workers=1,
                            app="bench.memory_app:app", env=env)
    client = None
    try:
        get(port, "/bench/trivial")
        read(port, gc="1")
        client = StreamClient(port, session_cookies(app, bench.accounts[1:high + 1]))
        taken = {}
        for count in (low, high):
            seconds = client.ask(f"open {count}")["seconds"]
            time.sleep(2)
            ungathered = read(port)["obmalloc"]["bytes in allocated blocks"]
            taken[count] = read(port, gc="1")
            gathered = taken[count]["obmalloc"]["bytes in allocated blocks"]
            print(f"... {count:,} open: {(ungathered - gathered) / 2**20:.1f} MiB of Python "
                  "objects were cyclic garbage gc had not gathered yet", file=sys.stderr)
            print(f"... {count:,} open ({seconds:.0f} s): RSS "
                  f"{taken[count]['status']['VmRSS'] / 2**20:.1f} MiB", file=sys.stderr)
        a, b = flat(taken[low]), flat(taken[high])
        streams = high - low
        print(f"\nper stream, from {low:,} to {high:,} open streams (one gevent worker), "
              f"load average {os.getloadavg()[0]:.1f}:")
        for name in b:
            if name in a or name.startswith("mappings"):
                a.setdefault(name, 0)
                print(f"  {name:40} {(b[name] - a[name]) / streams:>10,.1f}  "
                      f"({a[name]:>14,.0f} -> {b[name]:>14,.0f})")
        types = {name: (taken[high]["types"].get(name, 0) - taken[low]["types"].get(name, 0))
                 / streams for name in taken[high]["types"]}
        print("\nobjects per stream, by type:")
        for name, count in sorted(types.items(), key=lambda kv: -kv[1])[:60]:
            if count >= 0.05:
                print(f"  {name:60} {count:6.2f}")
        sizes = {name: (taken[high]["type_bytes"].get(name, 0)
                        - taken[low]["type_bytes"].get(name, 0)) / streams
                 for name in taken[high]["type_bytes"]}
        print("\nbytes per stream, by type (sys.getsizeof: gc-tracked objects only):")
        for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:30]:
            if size >= 8:
                print(f"  {name:60} {size:8.0f} B")
        if "grown" in taken[high]:
            print("\ngrown by traceback (bytes per stream, objects per stream):")
            for stat in taken[high]["grown"][:25]:
                print(f"  {stat['bytes'] / streams:8.1f} B {stat['count'] / streams:6.2f}  "
                      + " < ".join(reversed(stat["where"][-4:])))
        print("\nthe frames a stream waits under, innermost first:")
        for frame in read(port, frames="1")["frames"]:
            print(f"  {frame}")
        for type_name in args.held:
            print(f"\nwhat holds a {type_name}:")
            for holder in read(port, held=type_name)["held"]:
                print(f"  < {holder}")
        if args.trim:
            trimmed = flat(read(port, trim="1"))
            print(f"\nmalloc_trim(0) at {high:,}: RSS {b['status.VmRSS'] / 2**20:.1f} -> "
                  f"{trimmed['status.VmRSS'] / 2**20:.1f} MiB")
    finally:
        if client is not None:
            client.close()
        server.terminate()
        server.wait(timeout=30)
        bench.pg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
