"""The ``rq worker`` processes a benchmark starts, and the one way each is stopped.

A worker left running after its benchmark takes the next one's jobs from the same queue,
and the next benchmark waits for ever (seen once on a loaded machine: a worker asked for
its warm shutdown went back to its queue, and the smoke test's next group waited 600 s).
So every benchmark starts its workers with :func:`start` and stops them with :func:`stop`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

#: How long a worker has, after its warm shutdown (SIGTERM), to end the job in hand.
WARM_SECONDS = 60
#: How long it has, after RQ's cold shutdown (a second SIGTERM), before it is killed.
COLD_SECONDS = 10

#: A worker's (stdout, stderr), as ``communicate`` answers them (``None``: not a pipe).
Output = tuple[Any, Any]


def start(command: Sequence[str], **options: Any) -> subprocess.Popen[str]:
    """Start ``command`` (``rq worker …``, or a wrapper that forwards SIGTERM to one) in a
    process group of its own, text mode, with ``options`` for ``Popen``: :func:`stop`
    can then kill it with the work horse it forked."""
    return subprocess.Popen(list(command), start_new_session=True, text=True, **options)


def stop(processes: Sequence[subprocess.Popen[str]]) -> list[Output]:
    """Ask every worker of ``processes`` still running for its warm shutdown (SIGTERM),
    all at once, and wait for each to end; answer each one's output. One still running
    after :data:`WARM_SECONDS` is asked for RQ's cold shutdown (a second SIGTERM), and
    after :data:`COLD_SECONDS` more killed with its whole process group."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    return [_ended(process) for process in processes]


def _ended(process: subprocess.Popen[str]) -> Output:
    try:
        return process.communicate(timeout=WARM_SECONDS)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=COLD_SECONDS)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended just now, its group with it
            pass
        return process.communicate()
