"""Fresh Python processes pinned to their CPUs, each measuring checkpoints one after another
(``python -m sweeps.timing.child``): the timing stage's processes on CPU
(:mod:`sweeps.timing.stage`), and any caller that wants one checkpoint timed the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeps.errors import TimingError
from sweeps.timing import child
from sweeps.timing.devices import highest_cpus, run_child
from sweeps.timing.jobs import pick_cpus
from sweeps.timing.record import DecodeTiming, ModelCost


def time_checkpoint_pinned(
    checkpoint: str | Path, task: Mapping[str, Any], **kwargs: Any
) -> DecodeTiming:
    """:func:`~sweeps.timing.checkpoint.time_checkpoint` in a new Python process
    (``python -m sweeps.timing.child``) pinned to ``kwargs["threads"]`` CPUs
    (:func:`~sweeps.timing.jobs.pick_cpus`). CPU only; the timing comes back with the CPUs it ran
    on. TimingError when it failed."""
    (got,) = time_checkpoints_pinned([(checkpoint, task, kwargs)])
    if isinstance(got, str):
        raise TimingError(got)
    if got[0].decode is None:
        raise TimingError("decode time was not measured: keep decode in the measure list")
    return got[0].decode


#: memory processes at once at most: each holds a model and its data (a WMT model and its BPE'd
#: split: a few GiB), and a node's memory, unlike its cores, is not the lane's to fill
MAX_SIDE_BY_SIDE = 4


def side_by_side(batches: list, run: Callable, threads: int) -> list:
    """``run(*batch, cpus)`` for every batch, as many at a time as this node has CPUs for processes
    of ``threads`` threads (at most :data:`MAX_SIDE_BY_SIDE`), each on CPUs of its own; the
    results in the batches' order. For the memory processes: a peak of resident memory does not
    depend on what runs on the other cores (it is not a time), and each process pays a start-up of
    several seconds (torch and Lightning imported, the model and data loaded), so on two cores
    they take half as long side by side."""
    from concurrent.futures import ThreadPoolExecutor
    from queue import SimpleQueue

    pool = sorted(os.sched_getaffinity(0))
    slots: SimpleQueue = SimpleQueue()
    if len(pool) < threads:  # too few: time_checkpoints_pinned's own pick says so
        slots.put(None)
    for k in range(min(MAX_SIDE_BY_SIDE, len(pool) // threads)):  # the highest CPUs first
        slots.put(highest_cpus(threads, pool[: len(pool) - k * threads]))

    def one(batch):
        cpus = slots.get()
        try:
            return run(*batch, cpus)
        finally:
            slots.put(cpus)

    with ThreadPoolExecutor(max_workers=slots.qsize()) as ex:
        return list(ex.map(one, batches))


def time_checkpoints_pinned(
    items: Sequence[tuple[str | Path, Mapping[str, Any], Mapping[str, Any]]],
    env: Mapping[str, str] | None = None,
    cpus: Sequence[int] | None = None,
) -> list[tuple[ModelCost, float, float] | str]:
    """Several (checkpoint, task, kwargs) measured one after another in ONE new Python process
    (``python -m sweeps.timing.child``) pinned to ``kwargs["threads"]`` CPUs, after one calibration
    of the machine's speed; ``kwargs`` are :func:`~sweeps.timing.cost.measure_checkpoint`'s
    (its ``measure``: decode time only by default). Per item: (what was measured, started_at,
    finished_at), or the one-line reason it
    failed ("the timing process failed ..."); a process that dies fails the items it had not done."""

    if not items:
        return []
    if cpus is None:
        cpus = pick_cpus(max(int(kw.get("threads") or 1) for _, _, kw in items))
    request = {
        "parent": os.getpid(),  # the child ends itself when this process is gone
        "cpus": cpus,
        "jobs": [{"checkpoint": str(c), "task": dict(t), "kwargs": dict(kw)} for c, t, kw in items],
    }
    code, found, error = run_child(child.__name__, request, child.PREFIX, env)
    out: list[tuple[ModelCost, float, float] | str] = [
        f"the timing process failed (exit {code}) before this checkpoint: {error}"
    ] * len(items)
    for line in found:
        got = json.loads(line)
        i = int(got["index"])
        if "error" in got:
            out[i] = f"the timing process failed on this checkpoint: {got['error']}"
        else:
            cost = ModelCost.from_dict(got)
            cost = dataclasses.replace(
                cost,
                decode=cost.decode and dataclasses.replace(cost.decode, cpus=tuple(cpus)),
                train=cost.train and dataclasses.replace(cost.train, cpus=tuple(cpus)),
            )
            out[i] = (cost, float(got["started_at"]), float(got["finished_at"]))
    return out
