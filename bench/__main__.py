"""``python -m bench``: every benchmark, one table of figures and ratios, and the JSON.

Run from the repository root, with PostgreSQL and Redis up (the same
``WIKINOTIFY_TEST_DATABASE_URL`` and ``WIKINOTIFY_TEST_REDIS_URL`` as the tests)::

    .venv/bin/python -m bench            # the full sizes
    .venv/bin/python -m bench --quick    # about two minutes
    .venv/bin/python -m bench --tiny     # toy sizes: only shows that everything still runs
    .venv/bin/python -m bench --plot     # the last run's figures as pictures (docs/bench.svg)

Each module in :data:`MODULES` exposes ``run(quick) -> list[figure]`` (see
:mod:`bench.report`); one that is missing, or has no ``run`` yet, is reported as not run
with the reason, and the others go on. The figures are written to ``bench/results.json``
(``--json PATH``) with the date and the machine.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Sequence

from bench import report

#: The benchmarks, in the order they run: (module, what it measures).
MODULES = (
    ("bench.fanout", "fan-out, and what emit costs the request"),
    ("bench.fanout_split", "one fan-out split over several runs"),
    ("bench.announce", "an announcement to everyone beside an edit's fan-out"),
    ("bench.drain", "the mail drain against raw SMTP"),
    ("bench.live", "the summary poll and the push"),
    ("bench.capacity", "bytes per entry and per event, and emits per second"),
    ("bench.pubsub", "the live badge's Redis: its keys, and a fan-out's messages"),
    ("bench.inbox_scale", "the inbox in a table of ten million entries"),
)
DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json")
DEFAULT_SVG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "docs", "bench.svg")


def run_all(quick: bool, only: Sequence[str] | None = None
            ) -> tuple[list[report.Figure], dict[str, str], bool]:
    """Every benchmark's figures, those not run with why, and whether one failed."""
    figures: list[report.Figure] = []
    not_run: dict[str, str] = {}
    failed = False
    for name, what in MODULES:
        short = name.split(".", 1)[1]
        if only and short not in only:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            not_run[short] = "not present"
            continue
        except Exception as error:  # a module half-way through an edit
            traceback.print_exc()
            not_run[short] = f"could not be imported: {error}"
            failed = True
            continue
        run = getattr(module, "run", None)
        if run is None:
            not_run[short] = f"{name} has no run(quick) yet"
            continue
        print(f"=== {short}: {what}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            figures += run(quick)
        except (Exception, SystemExit) as error:
            # A benchmark stops with sys.exit(reason) when what it measured was wrong.
            traceback.print_exc()
            not_run[short] = f"failed: {error}"
            failed = True
        print(f"=== {short}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return figures, not_run, failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: about two minutes")
    parser.add_argument("--tiny", action="store_true",
                        help=f"toy sizes, for the smoke test (also {report.TINY_ENV}=1)")
    parser.add_argument("--json", default=DEFAULT_JSON, help="where the results go")
    parser.add_argument("--markdown", action="store_true",
                        help="print the table as Markdown (docs/benchmarks.md's)")
    names = ",".join(name.split(".", 1)[1] for name, _ in MODULES)
    parser.add_argument("--only", help=f"comma-separated: {names}")
    parser.add_argument("--plot", action="store_true",
                        help="run nothing: draw the figures of the JSON (--json) as an SVG")
    parser.add_argument("--svg", default=DEFAULT_SVG, help="where --plot draws (docs/bench.svg)")
    args = parser.parse_args(argv)
    if args.plot:
        from bench import plot

        plot.write(args.json, args.svg)
        print(f"SVG: {args.svg}")
        return 0
    if args.tiny:
        os.environ[report.TINY_ENV] = "1"
    quick = args.quick or args.tiny
    info = report.machine(report.service_args_defaults().database_url)
    only = args.only.split(",") if args.only else None
    figures, not_run, failed = run_all(quick, only)
    report.write_json(args.json, info, figures, not_run, quick)
    mode = "tiny" if args.tiny else "quick" if quick else "full"
    print(f"\nwikinotify benchmarks ({mode}), {time.strftime('%Y-%m-%d')}, "
          f"{report.describe(info)}\n")
    print(report.table(figures, markdown=args.markdown))
    for name, reason in not_run.items():
        print(f"{name}: not run: {reason}")
    print(f"\nJSON: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
