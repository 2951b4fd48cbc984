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
"""

from __future__ import annotations

import json
import sys
import time

from sweeps.timing.devices import pin  # the standard library only: torch is not loaded yet

PREFIX = "TIMING "


def main() -> None:
    request = json.loads(sys.stdin.read())
    pin(request["cpus"])
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
