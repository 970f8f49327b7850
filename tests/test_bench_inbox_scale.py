"""What ``python -m bench.inbox_scale`` reports of mark-all-read, from a made-up result: no
database, nothing about speed (docs/benchmarks.md#the-inbox-at-scale)."""

from __future__ import annotations

import pytest

from bench.inbox_scale import NAMES, Cost, Latencies, Marking, Result, figures, print_result


def _result(mark_seconds: list[float]) -> Result:
    return Result(entries=1_000, mine=100, size="1 MB",
                  latencies=Latencies({name: [1.0, 2.0] for name in NAMES}),
                  marking=Marking(mark_seconds, 100, [2.5] * len(mark_seconds), 0.2),
                  plans=None, load=(0.0, 0.0, 0.0))


def test_a_run_without_mark_rounds_prints_and_reports_the_requests():
    print_result(_result([]))
    assert not [f for f in figures(_result([])) if "mark all read" in f["name"]]


def test_the_target_is_judged_on_the_scattered_first_round(capsys):
    # Packed later rounds under the target must not hide a scattered first round over it.
    print_result(_result([3.5, 1.5, 1.6]))
    out = capsys.readouterr().out
    assert "scattered: 3.50 s, MISSED" in out
    assert "the job settling it onto her rows (a worker's, not the request's): 2.50" in out
    found = {f["name"]: f["value"] for f in figures(_result([3.5, 1.5, 1.6]))}
    assert found["1,000 entries, reader 100: mark all read, scattered (round 1)"] == 3.5
    assert found["1,000 entries, reader 100: mark all read, median of 3"] == pytest.approx(1.6)


def test_the_breakdown_prints_each_way_of_the_update(capsys):
    result = _result([3.5])
    result.breakdown = [Cost("as is", 4.5, 3.8, 127_829, 1_068_454_053),
                        Cost("every index but the unread one dropped", 2.75, None, 100_003, 0)]
    print_result(result)
    out = capsys.readouterr().out
    assert "as is |    4.50 |          3.80 |    127,829 |    1068" in out
    # No CPU figure when the server's backend is not on this machine.
    assert "dropped |    2.75 |               |    100,003 |       0" in out
