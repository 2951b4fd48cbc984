"""The sweep's timing stage: each finished trial's checkpoint timed alone, after the Tune run.

:func:`time_finished_trials` is what the launcher calls: it makes one :class:`TimingJob` per
finished trial and :func:`run_timing_stage` runs them in batches of ``timing.models_per_process``,
one Ray task per batch that holds a whole node's CPUs (or one whole GPU and the node's CPUs per
GPU), so nothing else runs beside it. It writes ``timing.json`` next to each trial's results and
skips trials already timed for the same checkpoint (so ``--resume`` never times a trial twice). On
CPU a batch is timed in fresh processes pinned to their CPUs (:mod:`sweeps.timing.pinned`,
running :mod:`sweeps.timing.child`), each timing the batch's checkpoints one after another. The
jobs, the settings and the lanes they run on live in :mod:`sweeps.timing.jobs`.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeps.spec.schema import TimingSpec
from sweeps.timing.checkpoint import (
    check_split,
    checkpoint_file,
    checkpoint_fingerprint,
)
from sweeps.timing.cost import ModelCost, measure_checkpoint
from sweeps.timing.jobs import (
    Lane,
    TimingJob,
    TimingOutcome,
    already_timed,
    lanes_for,
)
from sweeps.timing.measure import TimingError
from sweeps.timing.memory import MEMORY_ENV, combine
from sweeps.timing.pinned import side_by_side, time_checkpoints_pinned
from sweeps.timing.record import (
    TimingRecord,
    repeats_note,
    shared_core_note,
    train_note,
    write_json_atomic,
)
from sweeps.timing.train import fastest

WHAT = {"decode": "the decoding", "train": "a training step", "memory": "the peak memory"}


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
    else:
        for i, (checkpoint, task, options) in enumerate(items):
            started = time.time()
            try:
                cost = measure_checkpoint(checkpoint, task, **options)
                runs[i].append((cost, started, time.time()))
            except (
                Exception
            ) as exc:  # (a TimingError or the datamodule's own) one line, the others go on
                errors[i] = _last_line(exc)
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
            )
        )
    return out


def time_finished_trials(
    rows: list[dict],
    plans: Mapping[str, tuple[dict, str]],
    out_dir: Path,
    spec: Any,
    log: Callable[[str], None] | None = print,
) -> None:
    """The stage as the launcher runs it, on every finished trial's final checkpoint (rows whose
    status is done or stopped); ``plans`` maps a trial id to its plan and folder, ``spec`` is the
    study's ``timing`` block. Writes ``decode_seconds`` and its spread, or the stage's error, into
    the rows (:func:`sweeps.timing.rows.attach_timing`)."""
    from sweeps.timing.rows import attach_timing, attach_train_cost

    jobs, timed_rows = [], []
    for row in rows:
        if row["status"] not in ("done", "stopped", "converged") or not row.get("checkpoint"):
            continue
        plan, trial_dir = plans[row["trial_id"]]
        # timing.json beside the trial's results; a bucket's trial folder is not the driver's to write
        folder = trial_dir if "://" not in trial_dir else str(out_dir / "timing" / row["trial_id"])
        jobs.append(
            TimingJob(
                trial_id=row["trial_id"],
                checkpoint=str(row["checkpoint"]),
                task=plan.task,
                output_dir=folder,
                seed=plan.seed,
                split=spec.split,
            )
        )
        timed_rows.append(row)
    if not jobs:
        return
    if log:
        log(
            f"\ntiming {' and '.join(WHAT[m] for m in spec.measure)} of {len(jobs)} finished "
            f"trial(s), each alone on a node "
            f"(median of {spec.repeats}+ repeats"
            + (f" to +-{100 * spec.precision:g}%" if spec.precision else "")
            + f", {spec.threads} thread(s)):"
        )
    from sweeps.fusion.timing import time_once_per_group  # a fused group's shapes timed once

    for row, (outcome, cost) in zip(
        timed_rows, time_once_per_group(jobs, timed_rows, spec, log, run_timing_stage)
    ):
        record = outcome.record if outcome is not None else None
        attach_timing(
            row,
            record.timing.to_dict() if record and record.timing else None,
            outcome.error if outcome is not None else None,
        )
        if cost is not None:
            attach_train_cost(
                row,
                cost.train.to_dict() if cost.train else None,
                cost.memory.to_dict() if cost.memory else None,
            )


def run_timing_stage(
    jobs: Sequence[TimingJob],
    settings: TimingSpec | None = None,
    log: Callable[[str], None] | None = print,
) -> list[TimingOutcome]:
    """Time every job alone on the connected Ray cluster; returns one outcome per job, in order.

    Call after the Tune run, with Ray initialised. Jobs go in batches of
    ``settings.models_per_process`` (:func:`run_jobs`), each batch a Ray task pinned to one lane
    (see :func:`~sweeps.timing.jobs.plan_lanes`): a whole node's CPUs, or one GPU with its share of
    the node's CPUs, so no other Ray work shares its cores or GPU and lanes run one batch at a time.
    Jobs whose ``timing.json`` already matches their checkpoint are skipped; a failed job is
    reported and the others go on. ``timing.json`` is written by the driver, atomically.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        raise TimingError(
            "run_timing_stage needs a running Ray: call ray.init() (or the launcher's init_ray) first"
        )
    say = log or (lambda _msg: None)
    settings = settings or TimingSpec()
    outcomes: dict[int, TimingOutcome] = {}
    pending: deque[int] = deque()
    for i, job in enumerate(jobs):
        try:
            check_split(job.split)
            record = already_timed(job, settings.measure, settings.train_steps)
            checkpoint_file(job.checkpoint)
        except TimingError as exc:
            outcomes[i] = TimingOutcome(job, "error", error=str(exc))
            continue
        if record is not None:
            outcomes[i] = TimingOutcome(job, "skipped", record=record)
            say(
                f"[timing] trial {job.trial_id}: already timed for this checkpoint ({job.result_path})"
            )
        else:
            pending.append(i)
    for outcome in outcomes.values():
        if outcome.status == "error":
            say(f"[timing] trial {outcome.job.trial_id}: {outcome.error}")
    if pending:
        total, free_now = ray.cluster_resources(), ray.available_resources()
        lanes = lanes_for(settings, ray.nodes(), total)
        settle = time.monotonic() + 10  # the Tune run's last actors take a moment to give CPUs back
        while free_now.get("CPU", 0) < total.get("CPU", 0) and time.monotonic() < settle:
            time.sleep(0.25)
            free_now = ray.available_resources()
        if free_now.get("CPU", 0) < total.get("CPU", 0):
            say(
                f"[timing] {free_now.get('CPU', 0):g} of {total.get('CPU', 0):g} CPUs are free: each timing job "
                f"waits until its whole node is (is other Ray work still running?)"
            )
        task = ray.remote(max_retries=0)(run_jobs)
        size = settings.models_per_process
        batches = deque([list(pending)[k : k + size] for k in range(0, len(pending), size)])
        free = deque(lanes)
        running: dict[Any, tuple[list[int], Lane]] = {}
        while batches or running:
            while free and batches:
                lane, batch = free.popleft(), batches.popleft()
                ref = task.options(
                    num_cpus=lane.cpus,
                    num_gpus=lane.gpus,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(lane.node_id, soft=False),
                ).remote([jobs[i] for i in batch], settings, lane)
                running[ref] = (batch, lane)
            done, _ = ray.wait(list(running), num_returns=1)
            batch, lane = running.pop(done[0])
            free.append(lane)
            try:
                results: list[TimingRecord | str] = ray.get(done[0])
            except Exception as exc:  # one failed batch must not lose the others' timings
                results = [_last_line(exc)] * len(batch)
            for i, got in zip(batch, results):
                job = jobs[i]
                if isinstance(got, str):
                    outcomes[i] = TimingOutcome(job, "error", error=got)
                    say(f"[timing] trial {job.trial_id}: failed: {got}")
                    continue
                write_json_atomic(job.result_path, got.to_dict())
                outcomes[i] = TimingOutcome(job, "timed", record=got)
                say(f"[timing] trial {job.trial_id}: {cost_line(got)} -> {job.result_path}")
    return [outcomes[i] for i in range(len(jobs))]


def cost_line(record: TimingRecord) -> str:
    """The stage's log line for one trial: decode time, training step, peaks, as measured."""
    parts = []
    t = record.timing
    if t is not None:
        parts.append(
            f"decode {t.decode_seconds:.4f} s (median of {repeats_note(t)}; {t.sentences} sentences, "
            f"beam {t.beam_size}, {t.device}, {t.threads} thread(s){shared_core_note(t)})"
        )
    if record.train is not None:
        parts.append(train_note(record.train))
    m = record.memory
    if m is not None:
        peaks = [
            f"{name} {value:.1f} MiB"
            for name, value in (("train", m.train_peak_mb), ("decode", m.decode_peak_mb))
            if value is not None
        ]
        parts.append(f"peak {', '.join(peaks)} ({m.how})")
    return "; ".join(parts) or "nothing measured"


def _last_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the task's own exception
    lines = str(cause).strip().splitlines()
    return (lines[-1] if lines else type(cause).__name__)[:300]
