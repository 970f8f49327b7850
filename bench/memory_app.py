"""``bench/live_app.py`` with one route more, for ``bench/stream_memory.py``: what the
serving process holds, by layer (resident pages, glibc's heap, Python's allocator, the
greenlets' saved stacks, objects by type with their bytes, the frames a stream waits
under, what holds one object of a type, and tracemalloc's count by line when the
process traces). Bench only: it lays the process's insides open, so it is never part of
the wiki.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import gc
import os
import re
import sys
import tempfile
import tracemalloc
import types

from flask import jsonify, request
from greenlet import greenlet

from bench.live_app import app

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


_libc.mallinfo2.restype = _Mallinfo2
_snapshot: list[tracemalloc.Snapshot] = []


def _status() -> dict[str, int]:
    """``/proc/self/status``'s resident figures, in bytes."""
    found = {}
    with open("/proc/self/status") as file:
        for row in file:
            if row.startswith(("VmRSS", "RssAnon", "RssFile")):
                name, value = row.split(":", 1)
                found[name] = int(value.split()[0]) * 1024
    return found


def _mappings() -> dict[str, int]:
    """Resident bytes by kind of mapping (``/proc/self/smaps``): glibc's ``[heap]``,
    Python's allocator's 1 MiB arenas, other anonymous mappings (glibc's big blocks and
    thread arenas, thread stacks), files."""
    found: collections.Counter[str] = collections.Counter()
    kind = ""
    with open("/proc/self/smaps") as file:
        for row in file:
            head = row.split()
            if "-" in head[0] and not head[0].endswith(":"):
                start, end = (int(x, 16) for x in head[0].split("-"))
                name = head[5] if len(head) > 5 else ""
                kind = (name if name.startswith("[") else "file" if name else
                        "anon 1 MiB" if end - start == 2**20 else "anon other")
            elif head[0] == "Rss:":
                found[kind] += int(head[1]) * 1024
    return dict(found)


def _obmalloc() -> dict[str, int]:
    """The totals of ``sys._debugmallocstats`` (printed on the C stderr: caught there)."""
    with tempfile.TemporaryFile("w+") as caught:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read()
    totals = {}
    for name in ("arenas allocated current", "bytes in allocated blocks",
                 "bytes in available blocks", "unused pools", "bytes lost to pool headers",
                 "bytes lost to quantization", "bytes lost to arena alignment"):
        found = re.search(r"# " + re.escape(name) + r"\s*=\s*([\d,]+)", text)
        if found is None:
            found = re.search(re.escape(name) + r"[^=]*=\s*([\d,]+)", text)
        if found:
            totals[name] = int(found.group(1).replace(",", ""))
    return totals


def _bytes_by_type(objects: list) -> dict[str, int]:
    """``sys.getsizeof`` summed by type: the objects' own bytes (a dict's table, a
    string's text), not what they point to."""
    found: collections.Counter[str] = collections.Counter()
    for one in objects:
        try:
            found[_name(one)] += sys.getsizeof(one)
        except TypeError:
            pass
    return dict(found.most_common(120))


def _name(one: object) -> str:
    return f"{type(one).__module__}.{type(one).__qualname__}"


def _frames(waiting: greenlet) -> list[str]:
    """The frames a waiting greenlet (a stream's, the last made) waits under, innermost
    first, each with its locals' types: what every waiting stream keeps."""
    found = []
    frame = waiting.gr_frame
    while frame is not None:
        names = ", ".join(f"{k}: {_name(v)}" for k, v in frame.f_locals.items())
        found.append(f"{frame.f_code.co_qualname} ({frame.f_code.co_filename.rsplit('/', 2)[-1]}"
                     f":{frame.f_lineno}) [{names[:400]}]")
        frame = frame.f_back
    return found


def _describe(one: object) -> str:
    label = _name(one)
    if isinstance(one, types.FrameType):
        return f"{label} of {one.f_code.co_qualname} ({one.f_code.co_filename}:{one.f_lineno})"
    if isinstance(one, types.FunctionType):
        return f"{label} {one.__module__}.{one.__qualname__}"
    if isinstance(one, types.CellType):
        try:
            return f"{label} holding {_name(one.cell_contents)}"
        except ValueError:
            return f"{label} (empty)"
    if isinstance(one, (tuple, list)):
        return f"{label} of {len(one)}: " + ", ".join(_name(x) for x in one[:6])
    return label


def _holders_tree(objects: list, type_name: str, depth: int = 4) -> list[str]:
    """Every holder of one object of ``type_name`` (the last found), ``depth`` levels up."""
    found = next((one for one in reversed(objects) if _name(one) == type_name), None)
    lines: list[str] = []
    seen = {id(objects), id(lines)}

    def up(one: object, level: int) -> None:
        seen.add(id(one))
        holders = [h for h in gc.get_referrers(one) if id(h) not in seen]
        seen.add(id(holders))
        for holder in holders[:8]:
            key = ""
            if isinstance(holder, dict):
                key = " key " + ", ".join(repr(k)[:80] for k, v in holder.items() if v is one)
                key += f" (keys: {', '.join(repr(k)[:30] for k in list(holder)[:8])})"
            lines.append("  " * level + _describe(holder) + key)
            if level + 1 < depth:
                up(holder, level + 1)

    if found is not None:
        up(found, 0)
    return lines


@app.get("/bench/memory")
def memory():
    if request.args.get("gc"):
        gc.collect()
    if request.args.get("trim"):
        _libc.malloc_trim(0)
    info = _libc.mallinfo2()
    objects = gc.get_objects()
    greenlets = [one for one in objects if isinstance(one, greenlet)]
    by_type = collections.Counter(f"{type(one).__module__}.{type(one).__qualname__}"
                                for one in objects)
    answer = {
        "pid": os.getpid(),
        "status": _status(),
        "mappings": _mappings(),
        "malloc": {name: getattr(info, name) for name, _ in _Mallinfo2._fields_},
        "obmalloc": _obmalloc(),
        "allocated_blocks": sys.getallocatedblocks(),
        "greenlets": len(greenlets),
        "greenlet_stacks": sum(getattr(one, "_stack_saved", 0) for one in greenlets),
        "types": dict(by_type.most_common(80)),
        "type_bytes": _bytes_by_type(objects),
    }
    if request.args.get("frames") and greenlets:
        answer["frames"] = _frames(greenlets[-1])
    held = request.args.get("held")
    if held:
        answer["held"] = _holders_tree(objects, held)
    del objects, greenlets
    if tracemalloc.is_tracing():
        now = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        answer["traced"] = tracemalloc.get_traced_memory()[0]
        if _snapshot:
            stats = now.compare_to(_snapshot[0], "traceback")[:40]
            answer["grown"] = [
                {"bytes": stat.size_diff, "count": stat.count_diff,
                 "where": [f"{frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.lineno}"
                           for frame in stat.traceback][-8:]}
                for stat in stats]
        _snapshot[:] = [now]
    return jsonify(answer)
