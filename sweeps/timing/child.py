"""The pinned timing process: ``python -m sweeps.timing.child``, started by
:func:`sweeps.timing.pinned.time_checkpoints_pinned`.

Reads one JSON request on stdin (``cpus``, and ``jobs``: each a ``checkpoint``, ``task`` and
``kwargs`` for :func:`~sweeps.timing.cost.measure_checkpoint`, whose ``measure`` says what to
measure: decode time by default), pins itself to ``cpus`` before
torch is imported (so every thread torch starts keeps to them), finds the machine's speed once
(``calibration_seconds`` of the first job's kwargs) and times the checkpoints one after another,
printing one line per job as it finishes: ``TIMING {"index": i, "timing": {...}, "train": ...,
"memory": ...}`` (a :class:`~sweeps.timing.cost.ModelCost`), or
``TIMING {"index": i, "error": "..."}`` when that job failed (the others go on).

It ends itself (:data:`EXIT_ORPHANED`) as soon as the process that started it (the request's
``parent``) is gone: the timing stage ends a batch's Ray worker at once when the sweep is stopped,
and a measurement nobody will read must not run on, least of all beside the next run's.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from sweeps.exits import freeze_at_exit
from sweeps.timing.devices import pin  # the standard library only: torch is not loaded yet

PREFIX = "TIMING "
#: the exit status of a timing process whose parent went away
EXIT_ORPHANED = 3
#: seconds between its looks at its parent
WATCH_S = 0.2


def watch_parent(parent: int | None) -> None:
    """End this process when ``parent`` (the pid that started it) no longer is its parent: on
    Linux the kernel kills it then (``PR_SET_PDEATHSIG``: no thread of ours wakes to look, so the
    timed passes are not disturbed); elsewhere a thread looks every :data:`WATCH_S` seconds."""
    if not parent:
        return
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent:  # gone before the kernel was asked to watch
                os._exit(EXIT_ORPHANED)
            return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def main() -> None:
    freeze_at_exit()
    request = json.loads(sys.stdin.read())
    watch_parent(request.get("parent"))
    pin(request["cpus"])
    # torch, once this process is pinned to its CPUs
    from sweeps.timing.cost import measure_checkpoint
    from sweeps.timing.measure import CALIBRATION_S, fastest_probe

    jobs = request["jobs"]
    threads = {int(job["kwargs"].get("threads") or 1) for job in jobs}
    calibration = (
        float(jobs[0]["kwargs"].get("calibration_seconds", CALIBRATION_S))
        if jobs
        else CALIBRATION_S
    )
    timed = any(
        m in ("decode", "train") for job in jobs for m in job["kwargs"].get("measure", ["decode"])
    )  # (a memory-only process times nothing: no calibration)
    speed = (
        fastest_probe(calibration) if threads == {1} and timed else None
    )  # one thread: the passes are judged by it
    for i, job in enumerate(jobs):
        started = time.time()
        try:
            cost = measure_checkpoint(
                job["checkpoint"], job["task"], machine_speed=speed, **job["kwargs"]
            )
            line = {
                "index": i,
                **cost.to_dict(),
                "started_at": started,
                "finished_at": time.time(),
            }
        except Exception as exc:  # one bad checkpoint or task must not lose the others' timings
            text = str(exc).strip().splitlines()
            line = {"index": i, "error": f"{type(exc).__name__}: {text[-1] if text else ''}"}
        print(PREFIX + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
