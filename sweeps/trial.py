"""The function Ray Tune runs once per trial: build data, model and Trainer; train; report.

Each trial reports to Tune after every validation, with a checkpoint, so a retried trial
(``FailureConfig(max_failures)``) or a resumed sweep continues from where it stopped. It logs to
W&B through Lightning's ``WandbLogger`` only (one logging path: no driver-side W&B callback).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from ray import tune

from .build import build_datamodule, build_module

CHECKPOINT_FILE = "checkpoint.ckpt"
EXTRA_FILE = "trial_state.json"


class ChaosError(RuntimeError):
    """The failure a sweep's ``chaos`` block injects to exercise retries."""


class TuneReport(pl.Callback):
    """Reports ``trainer.callback_metrics`` to Tune after each validation, with a checkpoint.

    The project's own callback (rather than Ray's) so it always subclasses the same Lightning
    ``Callback`` class as the Trainer in use.
    """

    def __init__(self, time_offset: float = 0.0, extra_metrics: Optional[dict[str, Any]] = None) -> None:
        self.time_offset = time_offset
        self.extra_metrics = dict(extra_metrics or {})
        self.start = time.perf_counter()
        self.last_reported_step = -1

    def train_seconds(self) -> float:
        return self.time_offset + time.perf_counter() - self.start

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.report(trainer)

    def report(self, trainer: pl.Trainer) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if torch.is_tensor(v) and v.numel() == 1}
        metrics.update(self.extra_metrics)
        metrics.update(step=trainer.global_step, epoch=trainer.current_epoch, train_time_s=self.train_seconds())
        with tempfile.TemporaryDirectory() as tmp:
            # collective under DDP: every rank calls it, rank 0 writes the file
            trainer.save_checkpoint(os.path.join(tmp, CHECKPOINT_FILE))
            if trainer.is_global_zero:
                Path(tmp, EXTRA_FILE).write_text(json.dumps({"train_time_s": metrics["train_time_s"]}))
            self.send(metrics, tmp, trainer)
        self.last_reported_step = trainer.global_step

    def send(self, metrics: dict[str, Any], checkpoint_dir: str, trainer: pl.Trainer) -> None:
        """Hand one report to Ray: here Tune's session; :mod:`sweeps.ddp` sends to Ray Train."""
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir))


class Chaos(pl.Callback):
    """Raises once at ``step`` (per trial, remembered in a marker file) to test fault tolerance."""

    def __init__(self, step: int, marker: Path) -> None:
        self.step = step
        self.marker = marker

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step and not self.marker.exists():
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text("failed once\n")
            raise ChaosError(f"chaos: injected failure at step {trainer.global_step} (sweep spec `chaos` block)")


def resolve_plan(config: dict[str, Any]) -> dict[str, Any]:
    """The trial's plan with any Optuna-sampled ``section.key`` values written in."""
    plan = json.loads(json.dumps(config["plans"][config["cell"]]))  # deep copy, plain types
    for key, value in config.items():
        if "." in key:
            section, rest = key.split(".", 1)
            node = plan[section]
            parts = rest.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value.item() if hasattr(value, "item") else value
    return plan


def placement_metrics() -> dict[str, str]:
    """Where Ray placed this process: its node id and the GPU ids Ray assigned ("" for none).
    Reported with every result, so a sweep's placement on a cluster can be read back."""
    import ray

    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "gpu_ids": ",".join(str(g) for g in ray.get_gpu_ids())}


def restore_checkpoint(checkpoint, local_dir: str) -> tuple[Optional[str], float]:
    """Copy a reported checkpoint to ``local_dir``; returns (Lightning ckpt path or None, train time so far)."""
    if checkpoint is None:
        return None, 0.0
    time_offset = 0.0
    with checkpoint.as_directory() as d:
        if not os.path.exists(os.path.join(d, CHECKPOINT_FILE)):
            return None, 0.0
        shutil.copy(os.path.join(d, CHECKPOINT_FILE), local_dir)
        extra = Path(d, EXTRA_FILE)
        if extra.exists():
            time_offset = float(json.loads(extra.read_text()).get("train_time_s", 0.0))
    return os.path.join(local_dir, CHECKPOINT_FILE), time_offset


def finish_fit(trainer: pl.Trainer, module: pl.LightningModule, dm: pl.LightningDataModule, report: TuneReport) -> None:
    """After ``fit``: when the run ended between validations, validate once more so the final
    model is what the trial reports."""
    if report.last_reported_step != trainer.global_step:
        trainer.validate(module, datamodule=dm, verbose=False)
        if report.last_reported_step != trainer.global_step:
            report.report(trainer)


def pick_accelerator() -> tuple[str, int]:
    """GPU only when Ray assigned this trial one (a 0-GPU trial on a GPU node must stay on CPU)."""
    import ray

    if ray.get_gpu_ids() and torch.cuda.is_available():
        return "gpu", 1
    return "cpu", 1


def trainer_kwargs(trainer_cfg: dict[str, Any]) -> dict[str, Any]:
    kw = {k: v for k, v in trainer_cfg.items() if v is not None}
    if isinstance(kw.get("val_check_interval"), int):
        # count validation intervals in global steps across epochs, not batches within one epoch
        kw.setdefault("check_val_every_n_epoch", None)
    if "max_epochs" not in kw:
        kw["max_epochs"] = -1  # max_steps bounds the run
    return kw


def make_wandb_logger(config: dict[str, Any], plan: dict[str, Any], trial_id: str, trial_name: str):
    """W&B logger for this trial, or None when W&B is disabled. The API key is never passed here:
    wandb reads it from the environment or its own login."""
    wb = config["sweep"]["wandb"]
    if wb["mode"] == "disabled":
        return None
    from lightning.pytorch.loggers import WandbLogger

    run_config = {**plan, "trial_id": trial_id, "sweep": config["sweep"]["name"]}
    return WandbLogger(
        project=wb["project"],
        entity=wb.get("entity"),
        group=wb.get("group") or config["sweep"]["name"],
        tags=list(wb.get("tags") or []),
        name=f"{plan['cell']} seed={plan['seed']}" + (f" [{trial_name}]" if config["sweep"]["has_search"] else ""),
        id=trial_id,
        job_type="train",
        config=run_config,
        save_dir=config["sweep"]["wandb_dir"],
        mode=wb["mode"],
        resume="allow",
        log_model=False,
    )


def log_heatmaps(logger, module, dm, max_items: int = 2) -> None:
    """Attention heatmaps of a few validation sentences as W&B images."""
    if logger is None or not hasattr(module, "attention_heatmaps"):
        return
    from .plots import heatmap_figure

    import matplotlib.pyplot as plt

    batch = next(iter(dm.val_dataloader()))
    batch = {k: v.to(module.device) if torch.is_tensor(v) else v for k, v in batch.items()}
    items = module.attention_heatmaps(batch, max_items=max_items)
    figures = [heatmap_figure(item, title=f"{module.hparams.attention} #{i}") for i, item in enumerate(items)]
    if figures:
        logger.log_image(key="val/attention", images=figures)
    for fig in figures:
        plt.close(fig)


def run_trial(config: dict[str, Any]) -> None:
    """Tune function trainable. ``config["plans"][config["cell"]]`` is a resolved
    :class:`sweeps.spec.TrialPlan` config, ``config["sweep"]`` the sweep-wide settings; dotted keys
    are Optuna's samples."""
    plan = resolve_plan(config)
    sweep = config["sweep"]
    if sweep["resources"]["workers"] > 1:
        from .ddp import run_ddp_trial

        return run_ddp_trial(config, plan)

    torch.set_num_threads(max(1, int(sweep["resources"]["cpu"])))
    pl.seed_everything(plan["seed"], workers=True, verbose=False)
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()

    dm = build_datamodule(plan["task"], plan["seed"])
    dm.prepare_data()
    dm.setup("fit")
    module = build_module(plan["model"], dm)

    local_ckpt_dir = tempfile.mkdtemp(prefix="trial-resume-")
    ckpt_path, time_offset = restore_checkpoint(tune.get_checkpoint(), local_ckpt_dir)

    report = TuneReport(time_offset=time_offset, extra_metrics=placement_metrics())
    callbacks: list[pl.Callback] = [report]
    chaos_step = sweep.get("chaos_step")
    if chaos_step:
        callbacks.append(Chaos(chaos_step, Path(sweep["chaos_dir"]) / f"{trial_id}.failed"))

    logger = make_wandb_logger(config, plan, trial_id, trial_name)
    accelerator, devices = pick_accelerator()
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        logger=logger if logger is not None else False,
        callbacks=callbacks,
        enable_checkpointing=False,  # checkpoints go to Tune through TuneReport
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=ctx.get_trial_dir() if hasattr(ctx, "get_trial_dir") else None,
        use_distributed_sampler=not getattr(dm, "handles_distributed_sampling", False),
        **trainer_kwargs(plan["trainer"]),
    )
    fit_trial(trainer, module, dm, report, logger, ckpt_path, local_ckpt_dir,
              heatmaps=sweep["wandb"].get("log_heatmaps", True), trial_id=trial_id)


def fit_trial(
    trainer: pl.Trainer,
    module: pl.LightningModule,
    dm: pl.LightningDataModule,
    report: TuneReport,
    logger,
    ckpt_path: Optional[str],
    local_ckpt_dir: str,
    heatmaps: bool,
    trial_id: str,
) -> None:
    """Fit (from ``ckpt_path`` when resuming), report the final model, log heatmaps, and close W&B
    and the local checkpoint copy whatever happens."""
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
        finish_fit(trainer, module, dm, report)
        if heatmaps:
            try:
                log_heatmaps(logger, module, dm)
            except Exception as exc:  # a plotting problem must not fail a finished trial
                print(f"[trial {trial_id}] could not log attention heatmaps: {exc!r}")
    finally:
        close_wandb(logger)
        shutil.rmtree(local_ckpt_dir, ignore_errors=True)


def close_wandb(logger) -> None:
    """Finish the trial's W&B run and stop W&B's service while this process is whole: left to
    exit time, its teardown races Ray's worker shutdown and prints a ConnectionResetError."""
    if logger is None:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()
