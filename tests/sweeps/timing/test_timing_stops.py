"""The timing stage under a stop request, and the priority of its processes, on a real local Ray
and a real tiny checkpoint: a stop ends the running timing process at once and writes nothing of
its model; ``timing.priority: normal`` runs the processes a Ray worker starts at niceness 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import lightning.pytorch as pl
import pytest
from stage_hook import timing_processes

from datamodules import CopyTaskDataModule
from sweeps.build import build_module
from sweeps.timing.jobs import TimingJob, priority, timing_settings
from sweeps.timing.record import TIMING_FILE
from sweeps.timing.stage import run_timing_stage

COPY = dict(vocab_size=8, max_length=4, train_size=64, val_size=16, batch_size=8)

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def trial_dir(tmp_path_factory) -> Path:
    """A trial folder holding a Tune checkpoint folder of a tiny copy-task model (two steps)."""
    folder = tmp_path_factory.mktemp("trial")
    dm = CopyTaskDataModule(**COPY)
    dm.setup("fit")
    module = build_module({"preset": "tiny", "attention": "bahdanau", "val_decode": False}, dm)
    trainer = pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=dm)
    (folder / "checkpoint_000001").mkdir()
    trainer.save_checkpoint(folder / "checkpoint_000001" / "checkpoint.ckpt")
    return folder


class StopOnceMeasuring:
    """A stage watch that asks the stage to stop once a timing process has run for a few polls
    (well into its start-up or its passes), and keeps what the stage said it held; or after
    ``give_up`` polls (``POLL_S`` apart) without that, a batch that never started (the caller's
    assertions then say so, rather than the test's timeout minutes later)."""

    def __init__(self, polls: int = 4, give_up: int = 240) -> None:
        self.polls, self.give_up, self.seen, self.held, self.events = polls, give_up, 0, [], []

    def poll(self, cpus: float, gpus: float) -> bool:
        self.held.append((cpus, gpus))
        self.seen += bool(timing_processes())
        return self.seen >= self.polls or len(self.held) >= self.give_up

    def started(self, event: str) -> None:
        self.events.append(f"{event}:start")

    def done(self, event: str) -> None:
        self.events.append(f"{event}:done")


def long_timing(trial_dir: Path) -> tuple[TimingJob, object]:
    """The tiny model's job, and timing settings under which it would take minutes (100000
    repeats, one process, decode only)."""
    job = TimingJob(
        trial_id="t",
        checkpoint=str(trial_dir / "checkpoint_000001"),
        task={"name": "copy", **COPY},
        output_dir=str(trial_dir),
    )
    settings = timing_settings(
        repeats=100000,
        precision=None,
        max_seconds=3600,
        processes=1,
        warmup=0,
        measure=["decode"],
        calibration_seconds=0.2,
    )
    return job, settings


@pytest.mark.train
def test_a_stop_ends_the_running_timing_process_and_writes_nothing_of_its_model(
    local_ray, trial_dir
):
    """Timing that would take minutes (100000 repeats) is ended on the stop: the stage returns
    the job ``stopped``, no timing.json, no timing process left running; while it ran, the stage
    held the whole 2-CPU node, as the budget is told."""
    job, settings = long_timing(trial_dir)
    watch = StopOnceMeasuring()
    (outcome,) = run_timing_stage([job], settings, log=None, watch=watch)
    assert outcome.status == "stopped" and outcome.record is None
    assert not (trial_dir / TIMING_FILE).exists()
    assert timing_processes() == [], "the timing process outlived the stop"
    assert watch.seen >= watch.polls, (
        f"no timing process ran in {len(watch.held)} polls: the batch never started "
        f"({local_ray.available_resources().get('CPU', 0):g} of 2 CPUs free)"
    )
    assert (2.0, 0.0) in watch.held and watch.events == ["timing:start"]


class InterruptOnceMeasuring(StopOnceMeasuring):
    """A stage watch that raises KeyboardInterrupt (a Ctrl-C the launcher did not catch, a bug)
    where :class:`StopOnceMeasuring` would ask for a stop."""

    def poll(self, cpus: float, gpus: float) -> bool:
        if super().poll(cpus, gpus):
            raise KeyboardInterrupt
        return False


@pytest.mark.train
def test_an_exception_out_of_the_stage_still_ends_its_running_timing_process(local_ray, trial_dir):
    """An exception that leaves the stage in the middle of a long timing does not leave its batch
    running: its timing process is ended and the node's CPUs are free again (else the next stage,
    or the next sweep on this Ray, would wait for them for as long as the timing takes)."""
    job, settings = long_timing(trial_dir)
    watch = InterruptOnceMeasuring()
    with pytest.raises(KeyboardInterrupt):
        run_timing_stage([job], settings, log=None, watch=watch)
    assert watch.seen >= watch.polls, "interrupted before its timing process ran"
    for _ in range(40):  # the kernel kills it with its worker (PR_SET_PDEATHSIG): a moment later
        if not timing_processes():
            break
        threading.Event().wait(0.25)
    assert timing_processes() == [], "the timing process outlived the interrupt"
    for _ in range(40):  # Ray gives a killed worker's CPUs back within a moment
        if local_ray.available_resources().get("CPU", 0) >= 2:
            break
        threading.Event().wait(0.25)
    assert local_ray.available_resources().get("CPU", 0) == 2, "the batch still holds its lane"
    assert not (trial_dir / TIMING_FILE).exists()


def test_an_exception_out_of_the_held_out_stage_ends_its_running_evaluations(
    local_ray, monkeypatch
):
    """The held-out stage's loop, left by an exception while two evaluations run (here each a
    10-minute sleep in the evaluation's place), ends them: the node's two CPUs are free again."""
    from types import SimpleNamespace

    from sweeps.heldout import stage

    def sleeps(checkpoint: str, task: dict, seed: int) -> dict:
        import time

        time.sleep(600)
        return {}

    monkeypatch.setattr(stage, "_evaluate_task", sleeps)  # (defined here: sent by value)
    ray = local_ray

    class Interrupt:
        def poll(self, cpus: float, gpus: float) -> bool:
            if cpus == 2 and ray.available_resources().get("CPU", 0) == 0:
                raise KeyboardInterrupt  # both evaluations run
            return False

        def started(self, event: str) -> None: ...

    plan = SimpleNamespace(task={}, seed=0)
    todo = [({"trial_id": str(i), "checkpoint": "none"}, plan, None, None) for i in range(2)]
    resources = SimpleNamespace(cpu=1.0, gpu=0.0)
    with pytest.raises(KeyboardInterrupt):
        list(stage._evaluate(todo, resources, lambda _: None, Interrupt()))
    for _ in range(40):  # Ray gives a killed worker's CPUs back within a moment
        if ray.available_resources().get("CPU", 0) >= 2:
            break
        threading.Event().wait(0.25)
    assert ray.available_resources().get("CPU", 0) == 2, "an evaluation still holds its CPU"


class StopOnceSaid(StopOnceMeasuring):
    """A stage watch that stops the stage once the stage's log has a line with ``words``, or
    after ``polls`` polls (``POLL_S`` apart) without one."""

    def __init__(self, lines: list[str], words: str, polls: int = 40) -> None:
        super().__init__(polls)
        self.lines, self.words = lines, words

    def poll(self, cpus: float, gpus: float) -> bool:
        self.held.append((cpus, gpus))
        self.seen += 1
        return self.seen >= self.polls or any(self.words in line for line in self.lines)


def test_a_batch_that_waits_for_cpus_other_ray_work_holds_is_said_and_a_stop_still_ends_it(
    local_ray, trial_dir, monkeypatch
):
    """Another Ray task holds one of the node's two CPUs for good: the stage's batch, which wants
    the whole node, cannot start. The stage says so (after ``WAIT_NOTE_S``, here 1 s), naming the
    CPUs free, and a stop still ends the wait: the job is ``stopped``, nothing is written."""
    from sweeps.timing import stage

    monkeypatch.setattr(stage, "SETTLE_S", 0.5)
    monkeypatch.setattr(stage, "WAIT_NOTE_S", 1.0)
    ray = local_ray

    def hold(seconds: float) -> None:
        import time

        time.sleep(seconds)

    holder = ray.remote(num_cpus=1)(hold).remote(600)  # (defined here: sent by value)
    try:
        for _ in range(100):  # until Ray has started it
            if ray.available_resources().get("CPU", 0) <= 1:
                break
            threading.Event().wait(0.1)
        job = TimingJob(
            trial_id="t",
            checkpoint=str(trial_dir / "checkpoint_000001"),
            task={"name": "copy", **COPY},
            output_dir=str(trial_dir),
        )
        lines: list[str] = []
        watch = StopOnceSaid(lines, "for its lane")
        settings = timing_settings(processes=1, measure=["decode"])
        (outcome,) = run_timing_stage([job], settings, log=lines.append, watch=watch)
    finally:
        ray.cancel(holder, force=True)
    said = [line for line in lines if "for its lane" in line]
    assert len(said) == 1, lines
    assert "(1 of 2 CPUs free)" in said[0] and "--resume" in said[0], said[0]
    assert outcome.status == "stopped" and not (trial_dir / TIMING_FILE).exists()


def _may_lower_niceness() -> bool:
    """Whether a thread of this process may lower its niceness (root, CAP_SYS_NICE)."""
    got = []

    def probe() -> None:
        os.setpriority(os.PRIO_PROCESS, 0, 15)  # this thread only (Linux)
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
            got.append(True)
        except OSError:
            got.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return got[0]


def test_timing_priority_normal_runs_the_processes_a_ray_worker_starts_at_niceness_0(local_ray):
    """Ray runs its workers at niceness 15 (RAY_worker_niceness); a timing process they start
    inherits it unless ``timing.priority: normal``, under which it runs at 0 where the worker may
    lower its niceness (else the stage is told why not) and the worker is back at 15 after."""
    ray = local_ray

    def niceness_of_a_child(setting: str | None) -> tuple[int, int, str | None]:
        """In a Ray task: the niceness of a process started under ``priority(setting)`` (None: no
        priority block), this worker's own afterwards, and priority's note."""
        command = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]
        note = None
        if setting is None:
            child = subprocess.run(command, capture_output=True, text=True, check=True)
        else:
            with priority(setting) as note:
                child = subprocess.run(command, capture_output=True, text=True, check=True)
        return int(child.stdout), os.getpriority(os.PRIO_PROCESS, 0), note

    task = ray.remote(niceness_of_a_child)  # (defined here: sent to the workers by value)
    child, worker, _ = ray.get(task.remote(None))
    assert child == worker == 15, "Ray's default worker niceness, inherited"
    assert ray.get(task.remote("inherit")) == (15, 15, None)
    child, after, note = ray.get(task.remote("normal"))
    assert after == 15, "the worker's niceness was not given back"
    if _may_lower_niceness():
        assert (child, note) == (0, None)
    else:
        assert child == 15 and "RAY_worker_niceness=0" in note, note


def test_a_timing_process_ends_when_the_process_that_started_it_is_gone(trial_dir):
    """A Ray worker the stage ended (killed) cannot end the timing process it started: the
    process ends itself when its parent is gone (sweeps.timing.child.watch_parent), here in the
    middle of a timing that would take minutes."""
    job = {
        "checkpoint": str(trial_dir / "checkpoint_000001"),
        "task": {"name": "copy", **COPY},
        "kwargs": {"measure": ["decode"], "repeats": 100000, "precision": None, "warmup": 0},
    }
    script = (
        "import json, os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-m', 'sweeps.timing.child'], "
        "stdin=subprocess.PIPE, text=True)\n"
        f"job = json.loads({json.dumps(json.dumps(job))})\n"
        "request = {'parent': os.getpid(), 'cpus': [max(os.sched_getaffinity(0))], 'jobs': [job]}\n"
        "child.stdin.write(json.dumps(request))\n"
        "child.stdin.close()\n"
        "print(child.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=root
    )
    pid = int(parent.stdout.readline())
    threading.Event().wait(3.0)  # into its start-up (torch imported) or its passes
    assert _alive(pid), "the timing process ended by itself: nothing was tested"
    parent.kill()
    parent.wait()
    for _ in range(50):  # the kernel kills it at once (Linux), else its watcher within 0.2 s
        if not _alive(pid):
            break
        threading.Event().wait(0.1)
    assert not _alive(pid), "the timing process outlived its parent"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"
