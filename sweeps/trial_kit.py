"""The trial kit: what the single-process trainable (:mod:`sweeps.trial`) and the DDP trainable
(:mod:`sweeps.ddp`) share -- resolving the trial's plan, seeding, data and module, restoring a
checkpoint, the report-to-Ray callback, fault injection, the W&B logger, the Trainer's arguments,
and fitting.

Each trial reports to Ray after every validation, with a checkpoint, so a retried trial
(``FailureConfig(max_failures)``) or a resumed sweep continues from where it stopped. It logs to
W&B through Lightning's ``WandbLogger`` only (one logging path: no driver-side W&B callback).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from ray import tune

from .build import build_datamodule, build_module
from .settings import TrialSettings
from .spec.dotted import set_dotted

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
            set_dotted(plan, key, value.item() if hasattr(value, "item") else value)
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


def make_wandb_logger(settings: TrialSettings, plan: dict[str, Any], trial_id: str, trial_name: str):
    """W&B logger for this trial, or None when W&B is disabled. The API key is never passed here:
    wandb reads it from the environment or its own login."""
    wb = settings.wandb
    if wb.mode == "disabled":
        return None
    from lightning.pytorch.loggers import WandbLogger

    run_config = {**plan, "trial_id": trial_id, "sweep": settings.name}
    return WandbLogger(
        project=wb.project,
        entity=wb.entity,
        group=wb.group or settings.name,
        tags=list(wb.tags),
        name=f"{plan['cell']} seed={plan['seed']}" + (f" [{trial_name}]" if settings.has_search else ""),
        id=trial_id,
        job_type="train",
        config=run_config,
        save_dir=settings.wandb_dir,
        mode=wb.mode,
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


@dataclass
class TrialParts:
    """A trial's objects before its Trainer: data, module, the checkpoint to resume from, the
    report callback and the other callbacks."""

    dm: pl.LightningDataModule
    module: pl.LightningModule
    ckpt_path: Optional[str]
    local_ckpt_dir: str
    report: TuneReport
    callbacks: list[pl.Callback]


def prepare_trial(
    plan: dict[str, Any],
    settings: TrialSettings,
    checkpoint,
    trial_id: str,
    report_cls: type[TuneReport],
    extra_metrics: dict[str, Any],
    with_chaos: bool = True,
) -> TrialParts:
    """Seed, build and set up the datamodule and module, copy ``checkpoint`` (a Ray checkpoint or
    None) to local disk, and make the callbacks (``report_cls`` first; the chaos callback when the
    spec asks for it and ``with_chaos``)."""
    if settings.chaos_before_report and with_chaos:
        raise ChaosError("chaos: injected failure before the first report (sweep spec `chaos.fail_before_first_report`)")
    torch.set_num_threads(max(1, int(settings.resources.cpu)))
    pl.seed_everything(plan["seed"], workers=True, verbose=False)
    dm = build_datamodule(plan["task"], plan["seed"])
    dm.prepare_data()
    dm.setup("fit")
    module = build_module(plan["model"], dm)
    local_ckpt_dir = tempfile.mkdtemp(prefix="trial-resume-")
    ckpt_path, time_offset = restore_checkpoint(checkpoint, local_ckpt_dir)
    report = report_cls(time_offset=time_offset, extra_metrics=extra_metrics)
    callbacks: list[pl.Callback] = [report]
    if settings.chaos_step and with_chaos:
        callbacks.append(Chaos(settings.chaos_step, Path(settings.chaos_dir) / f"{trial_id}.failed"))
    return TrialParts(dm, module, ckpt_path, local_ckpt_dir, report, callbacks)


def common_trainer_kwargs(plan: dict[str, Any], parts: TrialParts, logger) -> dict[str, Any]:
    """The Trainer arguments every trainable passes: logger, callbacks, no Lightning checkpoints
    (they go to Ray through the report callback), quiet console, and the plan's trainer section."""
    return dict(
        logger=logger if logger is not None else False,
        callbacks=parts.callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=not getattr(parts.dm, "handles_distributed_sampling", False),
        **trainer_kwargs(plan["trainer"]),
    )


def fit_trial(trainer: pl.Trainer, parts: TrialParts, logger, heatmaps: bool, trial_id: str) -> None:
    """Fit (from the restored checkpoint when resuming), report the final model, log heatmaps, and
    close W&B and the local checkpoint copy whatever happens."""
    try:
        trainer.fit(parts.module, datamodule=parts.dm, ckpt_path=parts.ckpt_path)
        finish_fit(trainer, parts.module, parts.dm, parts.report)
        if heatmaps:
            try:
                log_heatmaps(logger, parts.module, parts.dm)
            except Exception as exc:  # a plotting problem must not fail a finished trial
                print(f"[trial {trial_id}] could not log attention heatmaps: {exc!r}")
    finally:
        close_wandb(logger)
        shutil.rmtree(parts.local_ckpt_dir, ignore_errors=True)


def close_wandb(logger) -> None:
    """Finish the trial's W&B run and stop W&B's service while this process is whole: left to
    exit time, its teardown races Ray's worker shutdown and prints a ConnectionResetError."""
    if logger is None:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()
