"""Multi-worker (DDP) trials: one Tune trial drives a Ray Train ``TorchTrainer`` of N workers.

Chosen by ``resources: {workers: N}`` with N > 1 in a sweep file; :mod:`sweeps.stages.train` picks
:func:`run_ddp_trial` as the trainable for such studies. The Tune trial itself is a thin driver (one CPU, see
:func:`sweeps.stages.train.trial_resources`); Ray Train V2 reserves the N workers (``cpu``/``gpu`` each)
in a placement group of its own and runs :func:`train_loop_per_worker` on each, with Lightning's
DDP through ``RayDDPStrategy`` / ``RayLightningEnvironment`` / ``prepare_trainer`` -- gloo on CPU,
NCCL on GPUs.

Reports and checkpoints go from the workers to Ray Train (``ray.train.report``, all ranks; rank 0
carries the checkpoint) and on to Tune through ``TuneReportCallback``. The Train run is named
``train-<trial id>`` under ``<storage>/<sweep>/ddp/``, so when Tune retries a failed trial
(``failure.max_failures``) or a sweep is resumed, the new driver builds a trainer of the same
name, Ray Train restores that run's checkpoint state, and every worker continues from the latest
checkpoint (``ray.train.get_checkpoint()``). Train itself does not retry (its own
``max_failures`` is 0): one retry budget, Tune's, covers a dead worker, a lost node and a dead
driver alike. W&B logs from rank 0 only.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from sweeps.storage import short_storage_faults
from sweeps.trial.callbacks import TuneReport
from sweeps.trial.fitting import common_trainer_kwargs, fit_trial, pick_accelerator, prepare_trial
from sweeps.trial.lifecycle import placement_metrics
from sweeps.trial.settings import TrialSettings
from sweeps.trial.teacher import end_without_teacher
from sweeps.trial.wandb_logger import make_wandb_logger


class TrainReport(TuneReport):
    """:class:`sweeps.trial.callbacks.TuneReport` for Ray Train workers: every rank calls
    ``ray.train.report`` (Train waits for all of them); only rank 0 attaches the checkpoint.
    Every report goes at once: the ranks report together, and only rank 0 closes a W&B run."""

    hold_last = False

    def send(self, metrics: dict[str, Any], checkpoint_dir: str, trainer: pl.Trainer) -> None:
        import ray.train

        checkpoint = (
            ray.train.Checkpoint.from_directory(checkpoint_dir) if trainer.is_global_zero else None
        )
        ray.train.report(metrics, checkpoint=checkpoint)


def train_run_name(trial_id: str) -> str:
    """The Ray Train run of one Tune trial. Deterministic, so a retried trial restores it."""
    return f"train-{trial_id}"


def run_ddp_trial(config: dict[str, Any], settings: TrialSettings) -> None:
    """Tune function trainable for a trial of ``resources.workers`` DDP workers (wrapped by
    ``tune.with_parameters(run_ddp_trial, settings=...)``).

    Args:
        config: the trial's Tune config (its plan; see :meth:`sweeps.trial.settings.TrialSettings.plan`).
        settings: the sweep-wide settings.
    """
    import ray.train
    from ray import tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    end_without_teacher(config, settings.metric)  # its teacher failed: the reason, no training
    plan = settings.plan(config)
    res = settings.resources
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()
    per_worker = {"CPU": float(res.cpu)}
    if res.gpu:
        per_worker["GPU"] = float(res.gpu)
    trainer = TorchTrainer(
        train_loop_per_worker,
        # V2 workers can't ask Tune for the trial's id or name: they travel in the loop config
        train_loop_config={
            "plan": plan,
            "settings": settings,
            "trial_id": trial_id,
            "trial_name": trial_name,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=int(res.workers),
            use_gpu=bool(res.gpu),
            resources_per_worker=per_worker,
        ),
        run_config=ray.train.RunConfig(
            name=train_run_name(trial_id),
            storage_path=settings.train_storage,
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=settings.spec.storage.keep_checkpoints
            ),
            failure_config=ray.train.FailureConfig(max_failures=0),
            callbacks=[TuneReportCallback()],
        ),
    )
    with short_storage_faults(f"trial {trial_id}, writing to {settings.train_storage}"):
        trainer.fit()  # raises on a failed run, so Tune retries the trial


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """What each Ray Train worker runs: one DDP rank of a Lightning ``fit``."""
    import ray.train
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer

    plan, settings = loop_config["plan"], loop_config["settings"]
    trial_id, trial_name = loop_config["trial_id"], loop_config["trial_name"]
    train_ctx = ray.train.get_context()
    rank, world_size = train_ctx.get_world_rank(), train_ctx.get_world_size()
    # a GPU this node's torch cannot use, or float16 mixed precision on the CPU, stops it here
    accelerator, _ = pick_accelerator(plan.trainer.get("precision") or "32-true")
    # rank 0 alone fails on chaos; Ray Train then stops the other ranks and the whole trial is retried
    parts = prepare_trial(
        plan,
        settings,
        ray.train.get_checkpoint(),
        trial_id,
        TrainReport,
        {**placement_metrics(), "world_size": world_size},
        with_chaos=rank == 0,
    )
    logger = (
        make_wandb_logger(settings, plan, trial_id, trial_name, parts.module) if rank == 0 else None
    )
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        **common_trainer_kwargs(plan, parts, logger),
    )
    trainer = prepare_trainer(trainer)
    fit_trial(
        trainer,
        parts,
        logger,
        heatmaps=rank == 0 and settings.wandb.log_heatmaps,
        trial_id=trial_id,
    )
