"""The single-process trainable: the function Ray Tune runs once per trial (one process, a
fractional or whole GPU or CPUs). Multi-worker trials use :mod:`sweeps.ddp`; both are built from
:mod:`sweeps.trial_kit`, and :mod:`sweeps.experiment` picks one."""
from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from ray import tune

from .settings import TrialSettings
from .trial_kit import (
    FinishOnStop,
    TuneReport,
    common_trainer_kwargs,
    fit_trial,
    make_wandb_logger,
    pick_accelerator,
    placement_metrics,
    prepare_trial,
)


def run_trial(config: dict[str, Any], settings: TrialSettings) -> None:
    """Tune function trainable (wrapped by ``tune.with_parameters(run_trial, settings=...)``).

    Args:
        config: the trial's Tune config (its plan; see :meth:`sweeps.settings.TrialSettings.plan`).
        settings: the study-wide settings.
    """
    plan = settings.plan(config)
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()
    parts = prepare_trial(plan, settings, tune.get_checkpoint(), trial_id, TuneReport, placement_metrics())
    logger = make_wandb_logger(settings, plan, trial_id, trial_name, parts.module)
    accelerator, devices = pick_accelerator()
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        default_root_dir=ctx.get_trial_dir() if hasattr(ctx, "get_trial_dir") else None,
        **common_trainer_kwargs(plan, parts, logger),
    )
    fit_trial(trainer, parts, logger, heatmaps=settings.wandb.log_heatmaps, trial_id=trial_id)


# Tune builds its trainable class from the function with these mixins (``ray.tune`` reads
# ``__mixins__``; ``tune.with_parameters`` carries them over): a stopped trial closes W&B first.
run_trial.__mixins__ = (FinishOnStop,)
