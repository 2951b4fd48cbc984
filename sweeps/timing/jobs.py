"""What the timing stage times, and where: one :class:`TimingJob` per finished trial, the sweep's
``timing`` settings (:func:`timing_settings`), a job's existing ``timing.json`` when it is for the
same checkpoint (:func:`already_timed`), the lanes a Ray cluster offers (:func:`plan_lanes`: a
whole node's CPUs, or one GPU with its share of them), the CPUs a pinned process gets
(:func:`pick_cpus`), the priority its processes run at (:func:`priority`), a job's fate
(:class:`TimingOutcome`), and what a stage after training checks between its steps
(:class:`StageWatch`). :mod:`sweeps.timing.stage` runs the jobs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, get_args, get_origin

from pydantic import ValidationError

from sweeps.errors import TimingError
from sweeps.spec.schema import TimingSpec
from sweeps.timing.devices import highest_cpus
from sweeps.timing.files import checkpoint_gone, measured_this, same_checkpoint
from sweeps.timing.record import TIMING_FILE, TimingRecord, read_record


@dataclass(frozen=True)
class TimingJob:
    """One finished trial to time.

    Args:
        trial_id: the trial's id (written into the result).
        checkpoint: its final Lightning checkpoint: a ``.ckpt`` file or a folder holding
            ``checkpoint.ckpt`` (a path every node can read).
        task: the trial plan's task section (``{"name": "copy", "max_length": 10, ...}``).
        output_dir: where ``timing.json`` is written (the trial's results folder).
        seed: the trial's seed (generated data such as the copy task's depend on it).
        beam_size: None: the checkpoint's ``val_beam_size`` (the sweep's beam).
        split: ``valid`` or ``test``.
    """

    trial_id: str
    checkpoint: str
    task: dict[str, Any]
    output_dir: str
    seed: int = 0
    beam_size: int | None = None
    split: str = "valid"

    @property
    def result_path(self) -> Path:
        return Path(self.output_dir) / TIMING_FILE


def timing_settings(**values: Any) -> TimingSpec:
    """The stage's settings are a sweep's ``timing`` block (:class:`sweeps.spec.schema.TimingSpec`);
    this makes one from keywords (the timing command's flags, tests), with a :class:`TimingError`
    naming the setting and what it allows instead of pydantic's report."""
    try:
        return TimingSpec(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name, ctx = str(err["loc"][0]), err.get("ctx") or {}
        bound = next(
            (
                (sym, ctx[key])
                for key, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                if key in ctx
            ),
            None,
        )
        if bound:
            raise TimingError(
                f"timing: {name} must be {bound[0]} {bound[1]}, got {err['input']!r}"
            ) from None
        if err["type"] == "literal_error":
            kind = TimingSpec.model_fields[name].annotation
            kind = get_args(kind)[0] if get_origin(kind) is list else kind  # timing.measure
            allowed = ", ".join(get_args(kind))
            raise TimingError(
                f"timing: {name} must be one of {allowed}, got {err['input']!r}"
            ) from None
        raise TimingError(f"timing: {name}: {err['msg']} (got {err['input']!r})") from None


class StageWatch(Protocol):
    """What a stage after training (timing, held-out) reports to while it runs: the launcher's
    state of the launch (:class:`sweeps.stages.launch_state.Launch`)."""

    def poll(self, cpus: float, gpus: float) -> bool:
        """Called between the stage's steps with the CPUs and GPUs its processes hold now (the
        budget charges them); True: stop now (a preemption, Ctrl-C, the budget ran out)."""
        ...

    def started(self, event: str) -> None:
        """The stage started work on the next models (``timing``: a batch, ``heldout``: one)."""
        ...

    def done(self, event: str) -> None:
        """One model finished by the stage (``timing``, ``heldout``), its record written."""
        ...


#: seconds between a stage's checks of its running tasks and of a stop request
POLL_S = 0.5


def end_tasks(refs: Sequence[Any]) -> None:
    """End a stage's running Ray tasks now (their workers killed; the timing processes they
    started end with them: :mod:`sweeps.timing.child`), and wait a little for Ray to see it."""
    import ray

    if not refs or not ray.is_initialized():
        return
    for ref in refs:
        ray.cancel(ref, force=True)
    ray.wait(list(refs), num_returns=len(refs), timeout=10)


@contextmanager
def tasks_end_with(running: Mapping[Any, Any]) -> Iterator[None]:
    """Ends the Ray tasks in ``running`` (keyed by their refs) when an exception leaves the block:
    an interrupt the launcher did not turn into a stop, a bug, a generator's caller that stops
    reading (:func:`end_tasks`). Left running, a timing batch would hold its whole node for as long
    as its timing takes, an evaluation its CPU."""
    try:
        yield
    except BaseException:
        end_tasks(list(running))
        raise


#: ``timing.priority``: the niceness the timing processes run at (None: the Ray worker's own)
NICENESS: dict[str, int | None] = {"inherit": None, "normal": 0}


@contextmanager
def priority(setting: str) -> Iterator[str | None]:
    """Run the block, and the processes it starts, at ``timing.priority``'s niceness: ``inherit``
    keeps this process's (a Ray worker's is 15 unless its node's Ray was started with
    ``RAY_worker_niceness=0``); ``normal`` sets 0 for the block, where this process may lower its
    niceness (root, or CAP_SYS_NICE); the previous niceness comes back after the block (the
    worker is reused). Yields None, or a line saying the niceness could not be lowered (the block
    then runs at the one it had)."""
    target, before = NICENESS[setting], os.getpriority(os.PRIO_PROCESS, 0)
    if target is None or before == target:
        yield None
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, target)
    except OSError as exc:
        note = (
            f"timing.priority {setting} asks for niceness {target}, but this process may not lower "
            f"its niceness {before} ({exc.strerror}): timed at {before}. Start Ray's nodes with "
            "RAY_worker_niceness=0, or run them as a user allowed to (CAP_SYS_NICE)"
        )
    else:
        try:
            yield None
        finally:
            os.setpriority(os.PRIO_PROCESS, 0, before)
        return
    yield note


@dataclass(frozen=True)
class TimingOutcome:
    """One job's fate in a stage run: ``timed``, ``skipped`` (already timed), ``error``, or
    ``stopped`` (the sweep stopped before it was timed: nothing of it is written)."""

    job: TimingJob
    status: str
    record: TimingRecord | None = None
    error: str | None = None


@dataclass(frozen=True)
class Lane:
    """Where one timing job at a time runs: a node, holding ``cpus`` CPUs and ``gpus`` GPUs there."""

    node_id: str
    cpus: float
    gpus: float = 0.0
    device: str = "cpu"


#: the ``timing`` settings that shape how a figure is measured (its repeats and their stopping
#: rule, the untimed passes, the calibration, the fresh processes on a CPU); a record keeps them
#: (:attr:`~sweeps.timing.record.TimingRecord.settings`) and a resume under others times again
MEASURE_SETTINGS = (
    "repeats",
    "precision",
    "max_seconds",
    "calibration_seconds",
    "warmup",
    "fresh_process",
    "processes",
)
#: of those, the ones that bear only on a CPU's timing (a GPU's runs in the Ray worker)
CPU_ONLY_SETTINGS = ("fresh_process", "processes")


def measure_settings(settings: TimingSpec, device: str = "cpu") -> dict[str, Any]:
    """The :data:`MEASURE_SETTINGS` of ``settings`` that bear on a timing on ``device``."""
    keys = [k for k in MEASURE_SETTINGS if device == "cpu" or k not in CPU_ONLY_SETTINGS]
    return {k: getattr(settings, k) for k in keys}


def already_timed(
    job: TimingJob,
    measure: Sequence[str] = ("decode",),
    train_steps: int | None = None,
    threads: int | None = None,
    device: str | None = None,
    settings: TimingSpec | None = None,
) -> TimingRecord | None:
    """The job's existing record when it is for the same checkpoint file (or, that file gone,
    names the same trial's checkpoint: :func:`~sweeps.timing.files.measured_this`), split and beam
    size and
    holds everything ``measure`` asks for (training timed over ``train_steps`` steps), its decode
    time taken on ``device`` (``cpu``, ``cuda``; None or ``auto``: either), on a CPU with
    ``threads`` torch threads, and under the same :data:`MEASURE_SETTINGS` as ``settings`` (a
    record written before it kept them holds for any): a figure of other settings is timed again,
    not relabelled."""
    record = read_record(job.result_path)
    if record is None:
        return None
    decode = record.timing
    if decode is not None and device not in (None, "auto") and decode.device != device:
        return None
    if decode is not None and threads is not None and decode.device == "cpu":
        if decode.threads != threads:
            return None
    if settings is not None and record.settings is not None:
        # the keys the record holds (a GPU's holds no CPU-only ones), compared with these
        now = measure_settings(settings)
        if any(now.get(key) != value for key, value in record.settings.items()):
            return None
    held = {
        "decode": record.timing is not None,
        "train": record.train is not None
        and (train_steps is None or record.train.steps == train_steps),
        "memory": record.memory is not None,
    }
    same_beam = (
        job.beam_size is None or record.timing is None or job.beam_size == record.timing.beam_size
    )
    if not (all(held.get(m, False) for m in measure) and same_beam and record.split == job.split):
        return None
    if checkpoint_gone(job.checkpoint):
        # nothing can time that model again: the record of its checkpoint keeps its figures
        return record if measured_this(record.checkpoint, job.checkpoint) else None
    try:  # last: it reads the whole checkpoint to hash it
        return record if same_checkpoint(record.fingerprint, job.checkpoint) else None
    except TimingError:
        return None


def plan_lanes(nodes: Sequence[Mapping[str, Any]], use_gpu: bool) -> list[Lane]:
    """One lane per alive node holding all its CPUs, or with ``use_gpu`` one lane per GPU holding
    that GPU and the node's CPUs divided by its GPUs. ``nodes`` as ``ray.nodes()`` returns them."""
    lanes = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        res = node.get("Resources") or {}
        cpus, gpus = float(res.get("CPU", 0)), int(res.get("GPU", 0))
        if use_gpu:
            share = float(int(cpus // gpus)) if gpus else 0.0
            lanes += [Lane(node["NodeID"], share, 1.0, "cuda") for _ in range(gpus)]
        elif cpus >= 1:
            lanes.append(Lane(node["NodeID"], cpus, 0.0, "cpu"))
    return lanes


def pick_cpus(count: int, allowed: Iterable[int] | None = None) -> list[int]:
    """``count`` CPUs to pin a timing process to (:func:`sweeps.timing.devices.highest_cpus`)."""
    try:
        return highest_cpus(count, allowed)
    except ValueError as exc:
        raise TimingError(f"timing {exc}; lower timing.threads") from None


def lanes_for(
    settings: TimingSpec, nodes: Sequence[Mapping[str, Any]], total: Mapping[str, float]
) -> list[Lane]:
    """The stage's lanes on a cluster of ``nodes`` (``ray.nodes()``) with ``total`` resources
    (``ray.cluster_resources()``): per GPU with ``settings.device`` cuda, or auto on a cluster with
    a GPU, else per node; a TimingError when cuda is asked for without a GPU, or no lane is found."""
    has_gpu = float(total.get("GPU", 0)) > 0
    if settings.device == "cuda" and not has_gpu:
        raise TimingError(
            "timing device cuda asked for, but the Ray cluster has no GPU; use cpu or auto"
        )
    lanes = plan_lanes(
        nodes, use_gpu=settings.device == "cuda" or (settings.device == "auto" and has_gpu)
    )
    if not lanes:
        raise TimingError("no alive Ray node with a CPU (or GPU) to time on")
    return lanes
