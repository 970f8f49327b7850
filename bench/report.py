"""What every benchmark reports, and how ``python -m bench`` prints and keeps it.

A figure is a plain dict, so that it goes into the JSON as it is::

    {"benchmark": "drain", "name": "5,000 users x 1 row, 1 worker", "value": 612.0,
     "unit": "mails/s", "limit": 1020.0, "limit_name": "raw smtplib, one connection",
     "ratio": 0.6}

``limit`` is the same machine's ceiling measured in the same run (``None`` when a figure
has none) and ``ratio`` is ``value / limit``. Each benchmark module exposes
``run(quick: bool) -> list[dict]`` returning such figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

#: Set (to ``1``) by ``python -m bench --tiny``: every benchmark runs at toy sizes, only
#: to show that it still runs (the smoke test). Its figures mean nothing.
TINY_ENV = "WIKINOTIFY_BENCH_TINY"

#: Appended to every benchmark's schema and queue names: the smoke test sets it, so that
#: it never drops the schema of a benchmark someone is running on the same PostgreSQL.
SUFFIX_ENV = "WIKINOTIFY_BENCH_SUFFIX"

Figure = dict[str, Any]

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"


def service_args(parser: argparse.ArgumentParser) -> None:
    """``--database-url`` and ``--redis-url``, defaulting to the tests' services."""
    parser.add_argument("--database-url", default=os.environ.get(
        "WIKINOTIFY_TEST_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--redis-url", default=os.environ.get(
        "WIKINOTIFY_TEST_REDIS_URL", DEFAULT_REDIS_URL))


def service_args_defaults() -> argparse.Namespace:
    """What :func:`service_args` gives with no argument (``python -m bench``'s)."""
    parser = argparse.ArgumentParser()
    service_args(parser)
    return parser.parse_args([])


def tiny() -> bool:
    return os.environ.get(TINY_ENV) == "1"


def scoped(name: str) -> str:
    """``name`` (a schema or a queue) with this run's suffix, if it has one."""
    return name + os.environ.get(SUFFIX_ENV, "")


def figure(
    benchmark: str,
    name: str,
    value: float,
    unit: str,
    limit: float | None = None,
    limit_name: str | None = None,
) -> Figure:
    ratio = value / limit if limit else None
    return {"benchmark": benchmark, "name": name, "value": value, "unit": unit,
            "limit": limit, "limit_name": limit_name, "ratio": ratio}


def _number(value: float | None) -> str:
    if value is None:
        return ""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def table(figures: Sequence[Figure], markdown: bool = False) -> str:
    """One row per figure: benchmark, figure, value with its unit, limit, ratio."""
    head = ("benchmark", "figure", "value", "limit", "ratio")
    rows = []
    for f in figures:
        limit = ""
        if f["limit"] is not None:
            limit = f"{_number(f['limit'])} {f['unit']} ({f['limit_name']})"
        ratio = f"{f['ratio']:.0%}" if f["ratio"] is not None else ""
        rows.append((f["benchmark"], f["name"], f"{_number(f['value'])} {f['unit']}", limit,
                     ratio))
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    def line(row: Sequence[str]) -> str:
        return "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)]).rstrip()


def _first_line(command: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def _proc_value(path: str, key: str) -> str | None:
    try:
        with open(path) as file:
            for row in file:
                if row.startswith(key):
                    return row.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine(database_url: str | None = None) -> dict[str, Any]:
    """What the figures were measured on."""
    memory = _proc_value("/proc/meminfo", "MemTotal")
    postgresql = None
    if database_url:
        import sqlalchemy as sa

        engine = sa.create_engine(database_url)
        try:
            with engine.connect() as conn:
                postgresql = conn.execute(sa.text("SHOW server_version")).scalar()
        except sa.exc.SQLAlchemyError:
            postgresql = None
        finally:
            engine.dispose()
    return {
        "cpu": _proc_value("/proc/cpuinfo", "model name") or platform.processor() or None,
        "cores": os.cpu_count(),
        "ram_gb": round(int(memory.split()[0]) / 1024 / 1024, 1) if memory else None,
        "postgresql": postgresql,
        "python": sys.version.split()[0],
        "os": platform.platform(),
        # The machine is shared at times: how busy it was as the run began.
        "load_average": round(os.getloadavg()[0], 2),
    }


def describe(info: dict[str, Any]) -> str:
    return (f"{info['cpu']}, {info['cores']} cores, {info['ram_gb']} GB RAM, PostgreSQL "
            f"{info['postgresql']}, Python {info['python']}, load average "
            f"{info.get('load_average')} at the start")


def write_json(path: str, info: dict[str, Any], figures: Sequence[Figure],
               not_run: dict[str, str], quick: bool) -> None:
    document = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": info,
                "quick": quick, "tiny": tiny(), "figures": list(figures), "not_run": not_run}
    with open(path, "w") as file:
        json.dump(document, file, indent=2)
        file.write("\n")
