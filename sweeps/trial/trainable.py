"""The single-process trainable: the function Ray Tune runs once per trial (one process, a
fractional or whole GPU or CPUs). Multi-worker trials use :mod:`sweeps.trial.ddp`; both are built from
:mod:`sweeps.trial.kit`, and :mod:`sweeps.run.experiment` picks one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from ray import tune

from sweeps.layout import CHECKPOINT_FILE, TUNE_RESULT_FILE
from sweeps.storage import short_storage_faults
from sweeps.trial import phases
from sweeps.trial.callbacks import FinishOnStop, TuneReport, placement_metrics
from sweeps.trial.kit import common_trainer_kwargs, fit_trial, pick_accelerator, prepare_trial
from sweeps.trial.settings import TrialSettings
from sweeps.trial.teacher import end_without_teacher
from sweeps.trial.wandb_logger import make_wandb_logger


def run_trial(config: dict[str, Any], settings: TrialSettings) -> None:
    """Tune function trainable (wrapped by ``tune.with_parameters(run_trial, settings=...)``).

    Args:
        config: the trial's Tune config (its plan; see :meth:`sweeps.trial.settings.TrialSettings.plan`).
        settings: the sweep-wide settings.
    """
    phases.start()
    if end_without_teacher(config, settings.metric):  # its teacher failed: the reason, no training
        return
    plan = settings.plan(config)
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()
    with short_storage_faults(
        f"trial {trial_id}, writing to {_trial_storage_path(ctx) or 'its storage'}"
    ):
        if report_earlier_finish(_trial_storage_dir(ctx), trial_id, plan.trainer["max_steps"]):
            return
        accelerator, devices = pick_accelerator()  # a GPU torch cannot use stops the trial here
        with phases.phase("setup"):  # seed, data, module, the checkpoint to resume from
            parts = prepare_trial(
                plan, settings, tune.get_checkpoint(), trial_id, TuneReport, placement_metrics()
            )
        with phases.phase("wandb_init"):
            logger = make_wandb_logger(settings, plan, trial_id, trial_name, parts.module)
            if logger is not None:
                _ = (
                    logger.experiment
                )  # wandb.init now, not inside the first training step: timed apart
        trainer = pl.Trainer(
            accelerator=accelerator,
            devices=devices,
            default_root_dir=ctx.get_trial_dir() if hasattr(ctx, "get_trial_dir") else None,
            **common_trainer_kwargs(plan, parts, logger),
        )
        try:
            fit_trial(
                trainer, parts, logger, heatmaps=settings.wandb.log_heatmaps, trial_id=trial_id
            )
        finally:
            phases.dump(_trial_storage_dir(ctx))  # phases.json beside result.json


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
    if not last.get("done") and not last.get("converged") and int(last.get("step", 0)) < max_steps:
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
    tune.report(
        metrics, checkpoint=tune.Checkpoint.from_directory(str(folders[-1])) if folders else None
    )
    return True


def _trial_storage_dir(ctx) -> str | None:
    """The trial's folder in the sweep's storage, where Tune writes its result.json (the trial's
    working directory is a staging copy elsewhere). None for storage that is not a local path."""
    path = _trial_storage_path(ctx)
    return path if path and Path(path).is_dir() else None


def _trial_storage_path(ctx) -> str | None:
    try:
        return ctx.get_storage().trial_fs_path
    except Exception:  # noqa: BLE001 -- an older or newer Ray without it: no check, as before
        return None


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


# Tune builds its trainable class from the function with these mixins (``ray.tune`` reads
# ``__mixins__``; ``tune.with_parameters`` carries them over): a stopped trial closes W&B first.
run_trial.__mixins__ = (FinishOnStop,)
