"""``python -m bench`` still runs: every benchmark at toy sizes (``--tiny``), as a
subprocess against the test PostgreSQL and Redis. Nothing about speed is asserted here;
benchmarks are not tests (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from bench.__main__ import MODULES
from tests.helpers.database import postgres_or_skip
from wikinotify.models import Notification

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The benchmarks in groups of 20 to 35 s at toy sizes, one test a group, which xdist's
#: workers run side by side (all of them in one run took two minutes, the suite's longest
#: test); capacity has its own test below. The first group holds what ``--plot`` draws
#: (the fan-out and the push) and the table's check (the drain).
GROUPS = ("fanout,live,drain", "fanout_split", "announce,pubsub,inbox_scale")
OWN_TEST = ("capacity",)


@pytest.fixture
def services(redis_url: str):
    """The test PostgreSQL and Redis; schemas and queues of this run's own, dropped after
    (a benchmark run alone leaves its schema for inspection; this one has nothing to see)."""
    # Each test's own: a run that failed never shares its queues with the next test's.
    base_url, suffix = postgres_or_skip(), f"_smoke_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    yield {"WIKINOTIFY_TEST_DATABASE_URL": base_url, "WIKINOTIFY_TEST_REDIS_URL": redis_url,
           "WIKINOTIFY_BENCH_SUFFIX": suffix}
    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        schemas = conn.scalars(sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE "
                                       "'wikinotify_bench%' AND right(nspname, :n) = :suffix"),
                               {"n": len(suffix), "suffix": suffix}).all()
        for schema in schemas:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


def run_bench(out, services, only: str) -> tuple[dict, str]:
    """``python -m bench --tiny --only <only>``: its JSON (checked as every run's must
    be) and what it printed."""
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--only", only, "--json", str(out)],
        cwd=ROOT, env={**os.environ, **services}, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    document = json.loads(out.read_text())
    assert document["tiny"] is True
    assert document["machine"]["postgresql"]
    for figure in document["figures"]:
        assert figure["value"] > 0, figure
        if figure["limit"] is not None:
            assert figure["ratio"] == pytest.approx(figure["value"] / figure["limit"])
    return document, result.stdout


def test_the_groups_hold_every_benchmark_once():
    grouped = [name for group in GROUPS for name in group.split(",")] + list(OWN_TEST)
    assert sorted(grouped) == sorted(name.split(".", 1)[1] for name, _ in MODULES)


@pytest.mark.slow
@pytest.mark.parametrize("only", GROUPS)
def test_python_m_bench_runs_every_benchmark(tmp_path, services, only):
    out = tmp_path / "results.json"
    document, printed = run_bench(out, services, only)
    ran = {f["benchmark"].replace("-", "_") for f in document["figures"]}  # fanout-split
    for name in only.split(","):
        # A benchmark not yet given its run(quick) is reported as not run, not failed.
        assert name in ran or "has no run" in document["not_run"].get(name, ""), (
            name, document["not_run"])
    if "drain" not in only.split(","):
        return
    # The table printed is the JSON's.
    assert "drain" in printed and "mails/s" in printed
    # --plot draws that run: a point for each fan-out size and each push measured.
    picture = tmp_path / "bench.svg"
    drawn = subprocess.run(
        [sys.executable, "-m", "bench", "--plot", "--json", str(out), "--svg", str(picture)],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert drawn.returncode == 0, drawn.stderr[-4000:]
    svg = picture.read_text()
    assert svg.startswith("<svg") and "no figures in this run" not in svg
    pushes = [f for f in document["figures"] if f["name"].startswith("push p")]
    assert pushes and svg.count("<circle") >= len(pushes)


def test_capacity_measures_every_entry_index_beside_the_row(tmp_path, services):
    """bench/capacity.py, the figures of docs/operating.md's capacity plan: bytes per entry
    in each of its three states, each of the entries table's indexes, and emits per second
    beside a plain INSERT's. A table and its indexes never take less room than the row's
    own bytes."""
    document, _ = run_bench(tmp_path / "results.json", services, "capacity")
    figures = document["figures"]
    totals = [f for f in figures if f["name"].startswith("bytes per entry, ") and f["limit"]]
    assert len(totals) == 3, [f["name"] for f in figures]
    for figure in totals:
        assert figure["value"] > figure["limit"] > 0, figure
    indexes = {f["name"].rsplit(": ", 1)[1] for f in figures
               if f["name"].startswith("bytes per entry, settled and rewritten: ")}
    declared = {index.name for index in Notification.__table__.indexes}
    assert declared | {"pk_wikinotify_notifications"} == indexes
    emits = [f for f in figures if f["unit"] == "events/s"]
    assert len(emits) == 1 and emits[0]["value"] > 0 and emits[0]["limit"] > 0
