"""What one Ray task of the timing stage does on its lane (:mod:`sweeps.timing.stage` places
it): a batch of jobs measured by fresh pinned processes on CPU, or in the task itself on a GPU
(:func:`run_jobs`), at the priority ``timing.priority`` asks for (:func:`run_batch`).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Sequence

from sweeps.spec.schema import TimingSpec
from sweeps.timing.files import checkpoint_fingerprint
from sweeps.timing.jobs import Lane, TimingJob, measure_settings, priority
from sweeps.timing.memory import MEMORY_ENV, combine
from sweeps.timing.pinned import side_by_side, time_checkpoints_pinned
from sweeps.timing.record import ModelCost, TimingRecord, fastest


def measure_options(settings, device: str) -> dict:
    """The options each timing process measures a model with. ``timing.max_seconds`` is per model
    and measure: with ``settings.processes`` fresh processes on a CPU, each gets its share (a
    process that reaches the precision sooner leaves its unused time unspent)."""
    shares = settings.processes if settings.fresh_process and device == "cpu" else 1
    return dict(
        device=device,
        repeats=settings.repeats,
        warmup=settings.warmup,
        threads=settings.threads,
        precision=settings.precision,
        max_seconds=settings.max_seconds / shares,
        calibration_seconds=settings.calibration_seconds,
        measure=list(settings.measure),
        train_steps=settings.train_steps,
    )


def run_jobs(
    jobs: Sequence[TimingJob], settings: TimingSpec, lane: Lane
) -> list[TimingRecord | str]:
    """Time a batch of jobs here and now (the body of the stage's Ray task); per job its record,
    or the one-line reason it failed (the others are still timed).

    On a CPU lane with ``settings.fresh_process`` the measurement runs in a new Python process
    pinned to ``settings.threads`` of the lane's CPUs (:mod:`sweeps.timing.pinned`), not in this
    Ray worker: on a 2-core VM an unpinned decode in a Ray worker (a dozen threads of its own)
    landed in one of two speeds per process, 0.015 or 0.023 s for the same split, so two runs of
    one study disagreed by up to 50 %; pinned, a lone process keeps to one core and its cache.

    Pinned processes still differ: six fresh processes timing one checkpoint gave medians from
    0.0077 to 0.0089 s, each known to +-1 %, one of them slow for its whole life. So the job runs
    ``settings.processes`` of them one after another and keeps the fastest process's timing (each
    process's median in ``process_medians``): a process in a slow mode measures the machine's
    state, not the model. Each process times every job of the batch, in an order rotated from one
    process to the next (a slow spell falls on different models), after one start-up and one
    calibration for them all: started once per model, the start-up (torch and Lightning imported,
    ~3.5 s on the 2-core VM) and the calibration (2 s) took 5.5 of the median 7.1 s a model cost.

    The timing processes time decoding and the training step (``timing.measure``); the peaks of
    ``memory`` are measured afterwards, each model in a fresh process of its own
    (:data:`MEMORY_ENV` says why), as many side by side as the node has CPUs
    (:func:`~sweeps.timing.pinned.side_by_side`). A model whose memory process fails keeps its
    timings, without peaks (a ``--resume`` measures them again)."""
    import ray

    kwargs = measure_options(settings, lane.device)
    items = [
        (
            job.checkpoint,
            job.task,
            dict(kwargs, seed=job.seed, split=job.split, beam_size=job.beam_size),
        )
        for job in jobs
    ]
    runs: list[list[tuple[ModelCost, float, float]]] = [[] for _ in jobs]
    errors: list[str | None] = [None] * len(jobs)
    if settings.fresh_process and lane.device == "cpu":
        n = len(jobs)
        timed = [m for m in settings.measure if m != "memory"]
        batches = []
        for p in range(settings.processes if timed else 0):
            shift = (p * n) // settings.processes
            order = list(range(shift, n)) + list(range(shift))
            batches.append((order, timed, None))
        memory = (  # one fresh process per model: see MEMORY_ENV
            [([i], ["memory"], MEMORY_ENV) for i in range(n)]
            if "memory" in settings.measure
            else []
        )

        def run_batch(order, measure, env, cpus=None):
            batch = [(*items[i][:2], dict(items[i][2], measure=measure)) for i in order]
            return order, time_checkpoints_pinned(batch, env, cpus)

        done = [run_batch(*b) for b in batches]  # the timed processes one after another
        done += side_by_side(memory, run_batch, settings.threads)
        for order, got_all in done:
            for i, got in zip(order, got_all):
                if isinstance(got, str):
                    errors[i] = errors[i] or got
                else:
                    runs[i].append(got)
    else:  # measured here: only this branch loads torch and Lightning into the Ray worker
        from sweeps.timing.cost import measure_checkpoint

        for i, (checkpoint, task, options) in enumerate(items):
            started = time.time()
            try:
                cost = measure_checkpoint(checkpoint, task, **options)
                runs[i].append((cost, started, time.time()))
            except (
                Exception
            ) as exc:  # (a TimingError or the datamodule's own) one line, the others go on
                errors[i] = last_line(exc)
    node, host = ray.get_runtime_context().get_node_id(), socket.gethostname()
    out: list[TimingRecord | str] = []
    for job, got, error in zip(jobs, runs, errors):
        if not got:
            out.append(error or "not timed")
            continue
        decodes = [c.decode for c, _, _ in got if c.decode is not None]
        trains = [c.train for c, _, _ in got if c.train is not None]
        peaks = [c.memory for c, _, _ in got if c.memory is not None]
        timing = min(decodes, key=lambda t: t.decode_seconds) if decodes else None
        if timing is not None and settings.fresh_process and lane.device == "cpu":
            timing = dataclasses.replace(
                timing, process_medians=tuple(t.decode_seconds for t in decodes)
            )
        train = fastest(trains) if trains else None
        # when it was timed: the timing processes' spans (the memory processes come after them all)
        spans = [r for r in got if r[0].decode is not None or r[0].train is not None] or got
        memory = combine(peaks) if peaks else None
        out.append(
            TimingRecord(
                trial_id=job.trial_id,
                checkpoint=str(job.checkpoint),
                fingerprint=checkpoint_fingerprint(job.checkpoint),
                split=job.split,
                timing=timing,
                node_id=node,
                hostname=host,
                reserved_cpus=lane.cpus,
                reserved_gpus=lane.gpus,
                started_at=min(a for _, a, _ in spans),
                finished_at=max(b for _, _, b in spans),
                train=train,
                memory=memory,
                measured=tuple(settings.measure),
                settings=measure_settings(settings, lane.device),
            )
        )
    return out


def run_batch(
    jobs: Sequence[TimingJob], settings: TimingSpec, lane: Lane
) -> tuple[list[TimingRecord | str], str | None]:
    """The stage's Ray task: :func:`run_jobs` at ``timing.priority`` (:func:`priority`); with
    the line saying the priority could not be had, if it could not."""
    with priority(settings.priority) as note:
        return run_jobs(jobs, settings, lane), note


def last_line(exc: BaseException) -> str:
    """An exception's reason in one line (300 characters at most), for a row or the log."""
    cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the task's own exception
    lines = str(cause).strip().splitlines()
    return (lines[-1] if lines else type(cause).__name__)[:300]
