"""A trial's W&B run: its config (the plan, flat and dotted, each key once), the Lightning logger,
attention heatmaps, and closing the run. Used by the trial kit (:mod:`sweeps.trial.kit`) for
single-process and DDP trials alike."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from sweeps.heldout.select import CONFIRM, ROLE, SELECT
from sweeps.spec import TrialPlan
from sweeps.trial.settings import TrialSettings


def wandb_config(plan: TrialPlan, module: pl.LightningModule | None = None) -> dict[str, Any]:
    """The trial's W&B config: its flat plan once (``cell``, ``seed``, the grid values and Optuna's
    samples under their flat names), then every other setting under its dotted name
    (``task.max_length``, ``trainer.max_steps``, ``model.hidden_size``). No key twice, no nulls:
    a model setting the preset supplies is taken from the built module's hyperparameters."""
    config = {k: v for k, v in plan.config.items() if v is not None}
    shown = set(plan.grid) | set(plan.params)  # dotted keys already there under a flat name
    if plan.config.get("teacher_checkpoint"):  # a student's: its flat teacher keys say it
        shown.add("model.teacher_checkpoint")
    resolved = dict(getattr(module, "hparams", {}) or {})
    for section in ("task", "model", "trainer"):
        values = dict(plan.sections[section])
        if section == "model":
            from lightning_modules.presets import PRESETS

            kwargs = resolved.get("attention_kwargs") or {}
            preset = PRESETS.get(str(resolved.get("preset") or values.get("preset")), {})
            values = {
                **preset,
                **{k: v for k, v in resolved.items() if k != "attention_kwargs" and v is not None},
                **kwargs,
                **{k: v for k, v in values.items() if v is not None},
            }
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if value is None or dotted in shown:
                continue
            config[dotted] = value
    return config


def configuration_label(cell_slug: str, number: int) -> str:
    """``<cell>#<n>``, the W&B job type of a configuration's runs; W&B takes at most 64 characters,
    so a long cell name is cut and a digest of it kept."""
    label = f"{cell_slug}#{number}"
    if len(label) <= 64:
        return label
    import hashlib

    digest = hashlib.sha1(cell_slug.encode()).hexdigest()[:8]
    return f"{cell_slug[: 64 - len(digest) - len(str(number)) - 2]}~{digest}#{number}"


def make_wandb_logger(
    settings: TrialSettings,
    plan: TrialPlan,
    trial_id: str,
    trial_name: str,
    module: pl.LightningModule | None = None,
):
    """W&B logger for this trial, or None when W&B is disabled. The API key is never passed here:
    wandb reads it from the environment or its own login."""
    wb = settings.wandb
    if wb.mode == "disabled":
        return None
    from lightning.pytorch.loggers import WandbLogger

    class PlanWandbLogger(WandbLogger):
        """Lightning's W&B logger with the trial's plan as the run's config: Lightning's own
        hyperparameter dump (the module's ``hparams``) would repeat it under other names."""

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

    run_config = {**wandb_config(plan, module), "trial_id": trial_id, "sweep": settings.name}
    job_type, label = "train", ""
    if (
        "configuration" in plan.config
    ):  # judged over seeds (sweeps.run.configs): its seeds' runs together
        job_type = configuration_label(plan.cell.slug, plan.config["configuration"])
        run_config["configuration_id"], label = (
            job_type,
            f" configuration={plan.config['configuration']}",
        )
    if plan.config.get(ROLE) == CONFIRM:  # retrained after the choice (sweeps.run.confirm)
        run_config[ROLE], label = CONFIRM, label + " confirm"
    elif settings.spec.confirm_seeds:  # the W&B Report's panels tell the two kinds apart by it
        run_config[ROLE] = SELECT
    tags, notes = list(wb.tags), wb.notes
    teacher = plan.config.get("teacher")
    if teacher:  # a student (sweeps.run.teachers) names its teacher's run (its id is the trial id)
        tags.append(f"teacher:{teacher}")
        line = f"Taught by W&B run {teacher} (checkpoint {plan.config.get('teacher_checkpoint')})."
        notes = f"{notes}\n{line}" if notes else line
    logger = PlanWandbLogger(
        project=wb.project,
        entity=wb.entity,
        group=wb.group or settings.name,
        tags=tags,
        notes=notes,
        name=f"{plan.cell.name}{label} seed={plan.seed}"
        + (f" [{trial_name}]" if settings.has_search else ""),
        id=trial_id,
        job_type=job_type,
        config=run_config,
        save_dir=settings.wandb_dir,
        mode=wb.mode,
        resume="allow",
        log_model=False,
    )
    logger._wandb_init.pop(
        "anonymous", None
    )  # deprecated in wandb: passing it at all prints a warning
    return logger


def log_heatmaps(logger, module, dm, max_items: int = 2) -> None:
    """Attention heatmaps of a few validation sentences as W&B images."""
    if logger is None or not hasattr(module, "attention_heatmaps"):
        return
    import matplotlib.pyplot as plt

    from sweeps.report.figures import heatmap_figure

    batch = next(iter(dm.val_dataloader()))
    batch = {k: v.to(module.device) if torch.is_tensor(v) else v for k, v in batch.items()}
    items = module.attention_heatmaps(batch, max_items=max_items)
    figures = [
        heatmap_figure(item, title=f"{module.hparams.attention} #{i}")
        for i, item in enumerate(items)
    ]
    if figures:
        logger.log_image(key="val/attention", images=figures)
    for fig in figures:
        plt.close(fig)


def close_wandb(logger, exit_code: int = 0) -> None:
    """Finish the trial's W&B run (``exit_code`` 1: state failed, for an attempt that crashed;
    a retry continues the run in a new segment) and stop W&B's service while this process is
    whole: left to exit time, its teardown races Ray's worker shutdown and prints a
    ConnectionResetError."""
    if logger is None:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
    wandb.teardown()
