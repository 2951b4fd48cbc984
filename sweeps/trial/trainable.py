"""The single-process trainable: the function Ray Tune runs once per trial (one process, a
fractional or whole GPU or CPUs). Multi-worker trials use :mod:`sweeps.trial.ddp`; both are built from
:mod:`sweeps.trial.fitting`, and :mod:`sweeps.stages.train` picks one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ray import tune

from sweeps.storage import short_storage_faults
from sweeps.trial import phases
from sweeps.trial.lifecycle import (
    FinishOnStop,
    placement_metrics,
    report_earlier_finish,
    trial_storage_dir,
    trial_storage_path,
)
from sweeps.trial.teacher import end_without_teacher

if TYPE_CHECKING:
    from sweeps.trial.settings import TrialSettings


def run_trial(config: dict[str, Any], settings: TrialSettings) -> None:
    """Tune function trainable (wrapped by ``tune.with_parameters(run_trial, settings=...)``).

    Args:
        config: the trial's Tune config (its plan; see :meth:`sweeps.trial.settings.TrialSettings.plan`).
        settings: the sweep-wide settings.
    """
    # torch and Lightning are imported here, in the trial's process: the launcher imports this
    # module only to hand Tune the function, and would pay ~3 CPU-s for them
    import lightning.pytorch as pl

    from sweeps.trial.callbacks import TuneReport
    from sweeps.trial.fitting import (
        common_trainer_kwargs,
        fit_trial,
        pick_accelerator,
        prepare_trial,
    )
    from sweeps.trial.wandb_logger import make_wandb_logger

    phases.start()
    end_without_teacher(config, settings.metric)  # its teacher failed: the reason, no training
    plan = settings.plan(config)
    ctx = tune.get_context()
    trial_id, trial_name = ctx.get_trial_id(), ctx.get_trial_name()
    with short_storage_faults(
        f"trial {trial_id}, writing to {trial_storage_path(ctx) or 'its storage'}"
    ):
        if report_earlier_finish(trial_storage_dir(ctx), trial_id, plan.trainer["max_steps"]):
            return
        # a GPU torch cannot use, or float16 mixed precision on the CPU, stops the trial here
        accelerator, devices = pick_accelerator(plan.trainer.get("precision") or "32-true")
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
            phases.dump(trial_storage_dir(ctx))  # phases.json beside result.json


# Tune builds its trainable class from the function with these mixins (``ray.tune`` reads
# ``__mixins__``; ``tune.with_parameters`` carries them over): a stopped trial closes W&B first.
run_trial.__mixins__ = (FinishOnStop,)
