"""The sweep's timing stage: each finished trial's checkpoint timed alone, after the Tune run.

:func:`time_finished_trials` is what the launcher calls: it makes one :class:`TimingJob` per
finished trial and :func:`run_timing_stage` runs them in batches of ``timing.models_per_process``
(:func:`sweeps.timing.remote.run_jobs`),
one Ray task per batch that holds a whole node's CPUs (or one whole GPU and the node's CPUs per
GPU), so nothing else runs beside it. It writes ``timing.json`` next to each trial's results and
skips trials already timed for the same checkpoint, split, beam size, device and (on a CPU) thread
count (so ``--resume`` never times a trial twice under the same settings). On
CPU a batch is timed in fresh processes pinned to their CPUs (:mod:`sweeps.timing.pinned`,
running :mod:`sweeps.timing.child`), each timing the batch's checkpoints one after another. The
jobs, the settings and the lanes they run on live in :mod:`sweeps.timing.jobs`.

A stop (a preemption, Ctrl-C, the budget: the launcher's :class:`~sweeps.timing.jobs.StageWatch`)
is checked every :data:`~sweeps.timing.jobs.POLL_S` seconds while batches run: the running batches'
Ray tasks are ended at once (their timing processes end with them), nothing of their models is
written, and ``--resume`` times those models, and only those.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from sweeps.errors import TimingError
from sweeps.spec.schema import TimingSpec
from sweeps.timing.files import check_split, checkpoint_file, checkpoint_gone, gone_in_launch
from sweeps.timing.fused import time_once_per_group
from sweeps.timing.jobs import (
    POLL_S,
    Lane,
    StageWatch,
    TimingJob,
    TimingOutcome,
    already_timed,
    end_tasks,
    lanes_for,
    tasks_end_with,
)
from sweeps.timing.record import (
    TimingRecord,
    attach_timing,
    attach_train_cost,
    repeats_note,
    shared_core_note,
    train_note,
    write_json_atomic,
)
from sweeps.timing.remote import (
    last_line,
    measure_options,  # noqa: F401 (re-exported: the stage's options)
    run_batch,
)

WHAT = {"decode": "the decoding", "train": "a training step", "memory": "the peak memory"}


#: how long the stage waits for the Tune run's last actors to give their CPUs back
SETTLE_S = 10.0
#: a batch waiting this long for its lane, held by other Ray work, is said (:class:`LaneWait`) ...
WAIT_NOTE_S = 60.0
#: ... and again after each this long
WAIT_AGAIN_S = 300.0

#: a stopped trial's ``timing_error``: why it has no figures, and what gives them
NOT_TIMED = "not timed: the sweep stopped first (--resume times it)"


def mark_not_timed(rows: list[dict[str, Any]]) -> int:
    """A stop before the timing stage: each finished trial's row without a decode time says it
    is not timed yet (:data:`NOT_TIMED`). Returns how many rows say so."""
    marked = 0
    for row in rows:
        finished = row.get("status") in ("done", "stopped", "converged") and row.get("checkpoint")
        if finished and row.get("decode_seconds") is None and not row.get("timing_error"):
            row["timing_error"] = NOT_TIMED
            marked += 1
    return marked


def time_finished_trials(
    rows: list[dict],
    plans: Mapping[str, tuple[dict, str]],
    out_dir: Path,
    spec: Any,
    log: Callable[[str], None] | None = print,
    watch: StageWatch | None = None,
) -> bool:
    """The stage as the launcher runs it, on every finished trial's final checkpoint (rows whose
    status is done or stopped); ``plans`` maps a trial id to its plan and folder, ``spec`` is the
    study's ``timing`` block. Writes ``decode_seconds`` and its spread, or the stage's error, into
    the rows (:func:`sweeps.timing.record.attach_timing`). True when ``watch`` stopped the stage
    before every model was timed (those rows say so: :data:`NOT_TIMED`)."""
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
        return False
    if log:
        log(
            f"\ntiming {' and '.join(WHAT[m] for m in spec.measure)} of {len(jobs)} finished "
            f"trial(s), each alone on a node "
            f"(median of {spec.repeats}+ repeats"
            + (f" to +-{100 * spec.precision:g}%" if spec.precision else "")
            + f", {spec.threads} thread(s)):"
        )
    results = time_once_per_group(
        jobs, timed_rows, spec, log, partial(run_timing_stage, watch=watch)
    )
    stopped = any(o is not None and o.status == "stopped" for o, _ in results)
    for row, (outcome, cost) in zip(timed_rows, results):
        record = outcome.record if outcome is not None else None
        if outcome is None:  # a group member whose decoding the stop left untimed, or not asked
            error = NOT_TIMED if stopped else None
        else:
            error = NOT_TIMED if outcome.status == "stopped" else outcome.error
        attach_timing(
            row,
            record.timing.to_dict() if record and record.timing else None,
            error,
            record.split if record else None,
        )
        if cost is not None:
            attach_train_cost(
                row,
                cost.train.to_dict() if cost.train else None,
                cost.memory.to_dict() if cost.memory else None,
            )
    return stopped


def run_timing_stage(
    jobs: Sequence[TimingJob],
    settings: TimingSpec | None = None,
    log: Callable[[str], None] | None = print,
    watch: StageWatch | None = None,
) -> list[TimingOutcome]:
    """Time every job alone on the connected Ray cluster; returns one outcome per job, in order.

    Call after the Tune run, with Ray initialised. Jobs go in batches of
    ``settings.models_per_process`` (:func:`~sweeps.timing.remote.run_jobs`), each batch a Ray task pinned to one lane
    (see :func:`~sweeps.timing.jobs.plan_lanes`): a whole node's CPUs, or one GPU with its share of
    the node's CPUs, so no other Ray work shares its cores or GPU and lanes run one batch at a time.
    Jobs whose ``timing.json`` already matches their checkpoint are skipped; a failed job is
    reported and the others go on. ``timing.json`` is written by the driver, atomically, once a
    batch has returned. ``watch`` is polled while batches run (:class:`StageWatch`): when it says
    stop, the running batches' tasks are ended and their jobs and the ones not started are
    ``stopped``.
    """
    import ray

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
            record = already_timed(
                job,
                settings.measure,
                settings.train_steps,
                settings.threads,
                settings.device,
                settings,
            )
            if record is None and checkpoint_gone(job.checkpoint):
                raise TimingError(gone_in_launch(job.checkpoint, "time"))
            if record is None:
                checkpoint_file(job.checkpoint)
        except TimingError as exc:
            outcomes[i] = TimingOutcome(job, "error", error=str(exc))
            continue
        if record is not None and checkpoint_gone(job.checkpoint):
            outcomes[i] = TimingOutcome(job, "skipped", record=record)
            say(
                f"[timing] trial {job.trial_id}: its checkpoint is gone; the figures timed for "
                f"it before are kept ({job.result_path})"
            )
        elif record is not None:
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
        total = ray.cluster_resources()
        lanes = lanes_for(settings, ray.nodes(), total)
        size = settings.models_per_process
        batches = deque([list(pending)[k : k + size] for k in range(0, len(pending), size)])
        if not _free_node(total, say, watch):
            batches.clear()  # stopped while the Tune run's last actors gave their CPUs back
        _run_batches(jobs, settings, lanes, batches, outcomes, LaneWait(say, total), say, watch)
    for i in pending:  # (not started: the stop came first)
        outcomes.setdefault(i, TimingOutcome(jobs[i], "stopped"))
    return [outcomes[i] for i in range(len(jobs))]


def _run_batches(
    jobs: Sequence[TimingJob],
    settings: TimingSpec,
    lanes: Sequence[Lane],
    batches: deque[list[int]],
    outcomes: dict[int, TimingOutcome],
    waiting: LaneWait,
    say: Callable[[str], None],
    watch: StageWatch | None,
) -> None:
    """Run ``batches`` (indices into ``jobs``) as Ray tasks, one per free lane at a time, writing
    each timed job's ``timing.json`` and its outcome as its batch returns, until all are done or
    ``watch`` says stop (the running batches ended, their jobs left without an outcome). The
    running batches are ended too when an exception leaves this loop."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(max_retries=0)(run_batch)
    free = deque(lanes)
    running: dict[Any, tuple[list[int], Lane]] = {}
    said = False
    with tasks_end_with(running):
        while batches or running:
            held = [lane for _, lane in running.values()]
            cpus, gpus = sum(x.cpus for x in held), sum(x.gpus for x in held)
            waiting.check(cpus, gpus)
            if watch is not None and watch.poll(cpus, gpus):
                end_tasks(list(running))
                left = [i for b, _ in running.values() for i in b] + [i for b in batches for i in b]
                say(f"[timing] stopped: {len(left)} model(s) not timed (--resume times them)")
                break
            while free and batches:
                lane, batch = free.popleft(), batches.popleft()
                ref = task.options(
                    num_cpus=lane.cpus,
                    num_gpus=lane.gpus,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(lane.node_id, soft=False),
                ).remote([jobs[i] for i in batch], settings, lane)
                running[ref] = (batch, lane)
                if watch is not None:
                    watch.started("timing")
            done, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            if not done:
                continue
            batch, lane = running.pop(done[0])
            free.append(lane)
            try:
                results, note = ray.get(done[0])
            except Exception as exc:  # one failed batch must not lose the others' timings
                if watch is not None and watch.poll(cpus, gpus):
                    # the stop's signal reached the Ray processes too (a signal to the whole
                    # process group): its models are not timed, not failed
                    batches.appendleft(batch)
                    continue
                results, note = [last_line(exc)] * len(batch), None
            if note and not said:
                say(f"[timing] {note}")
                said = True
            for i, got in zip(batch, results):
                job = jobs[i]
                if isinstance(got, str):
                    outcomes[i] = TimingOutcome(job, "error", error=got)
                    say(f"[timing] trial {job.trial_id}: failed: {got}")
                    continue
                write_json_atomic(job.result_path, got.to_dict())
                outcomes[i] = TimingOutcome(job, "timed", record=got)
                say(f"[timing] trial {job.trial_id}: {cost_line(got)} -> {job.result_path}")
                if watch is not None:
                    watch.done("timing")


def _free_node(
    total: Mapping[str, float], say: Callable[[str], None], watch: StageWatch | None
) -> bool:
    """Wait (:data:`SETTLE_S` at most) for the Tune run's last actors to give their CPUs back,
    saying so when they have not; False when ``watch`` stopped the stage meanwhile."""
    import ray

    settle = time.monotonic() + SETTLE_S
    free_now = ray.available_resources()
    while free_now.get("CPU", 0) < total.get("CPU", 0) and time.monotonic() < settle:
        if watch is not None and watch.poll(0.0, 0.0):
            return False
        time.sleep(0.25)
        free_now = ray.available_resources()
    if free_now.get("CPU", 0) < total.get("CPU", 0):
        say(
            f"[timing] {free_now.get('CPU', 0):g} of {total.get('CPU', 0):g} CPUs are free: each "
            "timing job waits until its whole node is (is other Ray work still running?)"
        )
    return True


class LaneWait:
    """Says, now and then, that batches handed to Ray wait for their lane because other Ray work
    holds its CPUs or GPUs: Ray starts a batch only once its whole lane is free, and the stage
    would otherwise wait in silence (for ever, should that work never end). It is certain that
    some batch waits when the cluster's resources in use are fewer than the started batches' lanes
    hold; the first line comes after :data:`WAIT_NOTE_S` of that, then one every
    :data:`WAIT_AGAIN_S`. ``total``: the cluster's resources, as the lanes were planned on."""

    def __init__(self, say: Callable[[str], None], total: Mapping[str, float]) -> None:
        self.say, self.total, self.since, self.next = say, total, None, 0.0

    def check(self, cpus: float, gpus: float) -> None:
        """Called at each poll with what the started batches' lanes hold."""
        import ray

        if not (cpus or gpus):
            self.since = None
            return
        total, free = self.total, ray.available_resources()
        short = [
            key
            for key, want in (("CPU", cpus), ("GPU", gpus))
            if want and total.get(key, 0) - free.get(key, 0) < want
        ]
        now = time.monotonic()
        if not short:
            self.since = None
            return
        if self.since is None:
            self.since, self.next = now, now + WAIT_NOTE_S
        if now < self.next:
            return
        self.next = now + WAIT_AGAIN_S
        free_now = ", ".join(
            f"{free.get(key, 0):g} of {total.get(key, 0):g} {key}s free" for key in short
        )
        self.say(
            f"[timing] a batch has waited {now - self.since:.0f} s for its lane ({free_now}): other "
            "Ray work holds the rest, and each batch waits until its whole node (or GPU) is free; "
            "a stop (Ctrl-C) ends the stage, and --resume times the models left"
        )


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
