"""Multi-worker (DDP) trials: one Tune trial drives a Ray Train ``TorchTrainer`` of N workers.

Chosen by ``resources: {workers: N}`` with N > 1 in a sweep file; :func:`sweeps.trial.run_trial`
hands such trials to :func:`run_ddp_trial`. The Tune trial itself is a thin driver (one CPU, see
:func:`sweeps.runner.trial_resources`); Ray Train V2 reserves the N workers (``cpu``/``gpu`` each)
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

import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from .build import build_datamodule, build_module
from .trial import (
    Chaos,
    TuneReport,
    fit_trial,
    make_wandb_logger,
    placement_metrics,
    restore_checkpoint,
    trainer_kwargs,
)


class TrainReport(TuneReport):
    """:class:`sweeps.trial.TuneReport` for Ray Train workers: every rank calls
    ``ray.train.report`` (Train waits for all of them); only rank 0 attaches the checkpoint."""

    def send(self, metrics: dict[str, Any], checkpoint_dir: str, trainer: pl.Trainer) -> None:
        import ray.train

        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if trainer.is_global_zero else None
        ray.train.report(metrics, checkpoint=checkpoint)


def train_run_name(trial_id: str) -> str:
    """The Ray Train run of one Tune trial. Deterministic, so a retried trial restores it."""
    return f"train-{trial_id}"


def run_ddp_trial(config: dict[str, Any], plan: dict[str, Any]) -> None:
    """Tune function body for a trial of ``resources.workers`` DDP workers.

    Args:
        config: the trial's Tune config (``config["sweep"]`` holds the sweep-wide settings).
        plan: the trial's resolved plan (:func:`sweeps.trial.resolve_plan`).
    """
    import ray.train
    from ray import tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    sweep = config["sweep"]
    res = sweep["resources"]
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()
    per_worker = {"CPU": float(res["cpu"])}
    if res["gpu"]:
        per_worker["GPU"] = float(res["gpu"])
    trainer = TorchTrainer(
        train_loop_per_worker,
        # V2 workers can't ask Tune for the trial's id or name: they travel in the loop config
        train_loop_config={"plan": plan, "sweep": sweep, "trial_id": trial_id, "trial_name": trial_name},
        scaling_config=ray.train.ScalingConfig(
            num_workers=int(res["workers"]),
            use_gpu=bool(res["gpu"]),
            resources_per_worker=per_worker,
        ),
        run_config=ray.train.RunConfig(
            name=train_run_name(trial_id),
            storage_path=sweep["train_storage"],
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=int(sweep.get("keep_checkpoints", 2))),
            failure_config=ray.train.FailureConfig(max_failures=0),
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()  # raises on a failed run, so Tune retries the trial


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """What each Ray Train worker runs: one DDP rank of a Lightning ``fit``."""
    import ray.train
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer

    plan, sweep = loop_config["plan"], loop_config["sweep"]
    trial_id, trial_name = loop_config["trial_id"], loop_config["trial_name"]
    train_ctx = ray.train.get_context()
    rank, world_size = train_ctx.get_world_rank(), train_ctx.get_world_size()

    torch.set_num_threads(max(1, int(sweep["resources"]["cpu"])))
    pl.seed_everything(plan["seed"], workers=True, verbose=False)
    dm = build_datamodule(plan["task"], plan["seed"])
    dm.prepare_data()
    dm.setup("fit")
    module = build_module(plan["model"], dm)

    local_ckpt_dir = tempfile.mkdtemp(prefix="ddp-resume-")
    ckpt_path, time_offset = restore_checkpoint(ray.train.get_checkpoint(), local_ckpt_dir)
    extra = {**placement_metrics(), "world_size": world_size}
    report = TrainReport(time_offset=time_offset, extra_metrics=extra)
    callbacks: list[pl.Callback] = [report]
    if sweep.get("chaos_step") and rank == 0:
        # rank 0 fails; Ray Train then stops the other ranks and the whole trial is retried
        callbacks.append(Chaos(sweep["chaos_step"], Path(sweep["chaos_dir"]) / f"{trial_id}.failed"))
    logger = make_wandb_logger({"sweep": sweep}, plan, trial_id, trial_name) if rank == 0 else None
    use_gpu = bool(sweep["resources"]["gpu"]) and torch.cuda.is_available()
    trainer = pl.Trainer(
        accelerator="gpu" if use_gpu else "cpu",
        devices="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        logger=logger if logger is not None else False,
        callbacks=callbacks,
        enable_checkpointing=False,  # checkpoints go to Ray Train through TrainReport
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=not getattr(dm, "handles_distributed_sampling", False),
        **trainer_kwargs(plan["trainer"]),
    )
    trainer = prepare_trainer(trainer)
    fit_trial(trainer, module, dm, report, logger, ckpt_path, local_ckpt_dir,
              heatmaps=rank == 0 and sweep["wandb"].get("log_heatmaps", True), trial_id=trial_id)
