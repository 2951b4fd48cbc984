"""What a trial's process does around its training, without torch or Lightning: quiet per-trial
logs, where Ray placed it, a stop from Tune while it trains (:class:`FinishOnStop`), its folder in
the sweep's storage, and a finish from an earlier run of the sweep reported again. The unfused
trainable (:mod:`sweeps.trial.trainable`) and a fused member's (:mod:`sweeps.trial.fused.member`, whose
process trains nothing and so imports no torch) share them."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from sweeps.layout import CHECKPOINT_FILE, TUNE_RESULT_FILE, finished_report

# Lines every trial would print at every start or report, forwarded to the sweep's console.
QUIET_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",  # GPU/TPU available, tips
    "lightning.fabric.utilities.rank_zero",
    "ray.train._internal.storage",  # "Checkpoint successfully created at ..."
    "ray.train.v2._internal.execution.storage",
    # "Restored on <ip> from checkpoint: Checkpoint(...)", a resumed trial's; Ray's log
    # deduplication holds the second trial's and prints it after the launch's last lines. The
    # launch says what a resume continues, and each result (result.json) its resumed_from
    "ray.tune.trainable.trainable",
)


def quiet_logs() -> None:
    """Raise the per-trial banners to warnings only; warnings and errors still reach the console."""
    import logging
    import warnings

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # Lightning's own notice about torch's pytree API, once per trial; nothing a sweep can change
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # on a machine with SLURM installed, Lightning suggests srun for every trial: Ray places trials
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system")
    # an epoch shorter than log_every_n_steps (a smoke run's, a small corpus'): each report logs
    # the training loss under results.csv's name anyway (sweeps.trial.wandb_run)
    warnings.filterwarnings(
        "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging"
    )
    quiet_lost_exits()


def quiet_lost_exits() -> None:
    """Ray ends a worker it no longer needs with SIGTERM, whose handler raises SystemExit. Where
    the signal lands inside a weakref or garbage-collection callback, Python cannot raise it, and
    prints "Exception ignored in: <function WeakSet...>" with Ray's traceback, which reached the
    sweep's console from a trial that had finished. Such a lost exit is dropped; every other
    exception Python cannot raise is printed as before (``sys.unraisablehook``)."""
    if getattr(sys.unraisablehook, "drops_lost_exits", False):
        return
    previous = sys.unraisablehook

    def hook(info: Any) -> None:
        if not isinstance(info.exc_value, SystemExit):
            previous(info)

    hook.drops_lost_exits = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def placement_metrics() -> dict[str, Any]:
    """Where Ray placed this process: its node id, the GPU ids Ray assigned ("" for none) and the
    share of a GPU it holds (``gpu_share``, e.g. 0.5 when trials pack two to a GPU). Reported with
    every result, so a sweep's placement on a cluster can be read back."""
    import ray

    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids()),
        "gpu_share": float(ctx.get_assigned_resources().get("GPU", 0.0)),
    }


#: seconds a stopped trial's process waits for its training thread to close W&B (heatmaps included)
STOP_GRACE_S = 120.0


#: set by FinishOnStop when Tune stops the trial while it trains (a Ctrl-C of the sweep, say): the
#: report callback then ends the fit at the next step, the way a scheduler's stop ends it at a report
STOP_REQUESTED = threading.Event()


class FinishOnStop:
    """Mixin for Tune's function trainable (through the trainable's ``__mixins__``): when Tune
    stops a trial, wait for the training thread to finish before the actor goes.

    Ray's ``FunctionTrainable.cleanup`` lets the training thread go without waiting for it
    (``session.finish(timeout=0)``), and the actor's process exits while the thread is still
    unwinding the ``SystemExit`` of the stop. W&B's service then sees its client vanish mid-run and
    abandons the run: a 7-byte ``.wandb`` file, state unknown. Waiting here lets
    :func:`sweeps.trial.fitting.fit_trial` (or a fused member) log the heatmaps and ``wandb.finish()``
    the run first."""

    def setup(self, config) -> None:
        quiet_logs()  # before Tune restores a resumed trial, whose banner it quiets
        super().setup(config)  # type: ignore[misc]

    def cleanup(self) -> None:
        self._finish_training_thread()
        super().cleanup()  # type: ignore[misc]

    def reset_config(self, new_config) -> bool:
        """The actor runs the next trial (``reuse_actors``): Tune gives the stopped trial's thread
        only ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` (2 s) to end, then fails the *next* trial ("Could
        not re-use actor"); closing W&B and logging heatmaps takes longer. Wait here as on cleanup."""
        self._finish_training_thread()
        return super().reset_config(new_config)  # type: ignore[misc]

    @staticmethod
    def _finish_training_thread() -> None:
        from ray.train._internal.session import get_session

        session = get_session()
        thread = getattr(session, "training_thread", None)
        if (
            session is not None
            and session.training_started
            and thread is not None
            and thread.is_alive()
        ):
            session.stop_event.set()  # what session.finish does first: the thread leaves its report call
            session.continue_lock.release()
            STOP_REQUESTED.set()  # or, if it is training, at its next step
            thread.join(timeout=STOP_GRACE_S)


# What Tune adds to every result; the rest of a result.json record is what the trial reported.
TUNE_RESULT_KEYS = frozenset(
    {
        "done",
        "training_iteration",
        "trial_id",
        "date",
        "timestamp",
        "time_this_iter_s",
        "time_total_s",
        "pid",
        "hostname",
        "node_ip",
        "config",
        "time_since_restore",
        "iterations_since_restore",
        "checkpoint_dir_name",
        "should_checkpoint",
        "experiment_tag",
    }
)


def report_earlier_finish(trial_dir: str | None, trial_id: str, max_steps: int) -> bool:
    """When this trial already finished in an earlier run of the sweep, report that run's last
    result again, with its newest checkpoint, and say so: True, and the trial must not train.

    Tune snapshots its experiment state every few seconds; a launcher killed (kill -9) after a
    trial finished but before the next snapshot comes back with that trial RUNNING at an older
    checkpoint, and would train it again from there. Its own ``result.json`` knows better: its last
    result reached ``max_steps``, or Tune wrote it with ``done: true`` (a scheduler's stop)."""
    if not trial_dir:
        return False
    lines = [ln for ln in _read_lines(Path(trial_dir) / TUNE_RESULT_FILE) if ln.strip()]
    try:
        last = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return False  # a last line cut short by the kill: the trial had not finished
    if not finished_report(last, max_steps):
        return False
    folders = sorted(
        p for p in Path(trial_dir).glob("checkpoint_*") if (p / CHECKPOINT_FILE).is_file()
    )
    metrics = {k: v for k, v in last.items() if k not in TUNE_RESULT_KEYS}
    print(
        f"[trial {trial_id}] finished in an earlier run of this sweep (step {metrics.get('step')}): "
        f"its result is reported again, not trained again",
        flush=True,
    )
    # here, not at the top: the held-out stage's tasks and a fused group's process import this
    # module for its logging helpers alone, and Tune brings pandas with it (1.2 s)
    from ray import tune

    tune.report(
        metrics, checkpoint=tune.Checkpoint.from_directory(str(folders[-1])) if folders else None
    )
    return True


def trial_storage_dir(ctx) -> str | None:
    """The trial's folder in the sweep's storage, where Tune writes its result.json (the trial's
    working directory is a staging copy elsewhere). None for storage that is not a local path."""
    path = trial_storage_path(ctx)
    return path if path and Path(path).is_dir() else None


def trial_storage_path(ctx) -> str | None:
    try:
        return ctx.get_storage().trial_fs_path
    except Exception:  # noqa: BLE001 -- an older or newer Ray without it: no check, as before
        return None


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []
