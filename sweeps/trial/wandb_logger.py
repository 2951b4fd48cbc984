"""A trial's W&B logger for Lightning (an unfused trial, single-process or DDP, through
:mod:`sweeps.trial.fitting`) and its attention heatmaps. The run's arguments and config are
:mod:`sweeps.trial.wandb_run`'s, shared with a fused member's run."""

from __future__ import annotations

import io
from typing import Any

import lightning.pytorch as pl
import torch

from sweeps.report.figures import heatmap_figure
from sweeps.spec import TrialPlan
from sweeps.trial.settings import TrialSettings
from sweeps.trial.wandb_run import HEATMAP_KEY, run_arguments


def make_wandb_logger(
    settings: TrialSettings,
    plan: TrialPlan,
    trial_id: str,
    trial_name: str,
    module: pl.LightningModule | None = None,
):
    """W&B logger for this trial, or None when W&B is disabled."""
    arguments = run_arguments(settings, plan, trial_id, trial_name, module)
    return None if arguments is None else lightning_logger(arguments)


def lightning_logger(arguments: dict[str, Any]):
    """Lightning's W&B logger opening the run :func:`sweeps.trial.wandb_run.run_arguments`
    describes, with the trial's plan as the run's config: Lightning's own hyperparameter dump
    (the module's ``hparams``) would repeat it under other names."""
    from lightning.pytorch.loggers import WandbLogger

    class PlanWandbLogger(WandbLogger):
        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

    arguments = dict(arguments)
    logger = PlanWandbLogger(save_dir=arguments.pop("dir"), log_model=False, **arguments)
    logger._wandb_init.pop(
        "anonymous", None
    )  # deprecated in wandb: passing it at all prints a warning
    return logger


def heatmap_figures(module, dm, max_items: int = 2) -> list:
    """Matplotlib figures of the module's attention on a few validation sentences."""
    if not hasattr(module, "attention_heatmaps"):
        return []

    batch = next(iter(dm.val_dataloader()))
    batch = {k: v.to(module.device) if torch.is_tensor(v) else v for k, v in batch.items()}
    items = module.attention_heatmaps(batch, max_items=max_items)
    return [
        heatmap_figure(item, title=f"{module.hparams.attention} #{i}")
        for i, item in enumerate(items)
    ]


def log_heatmaps(logger, module, dm, max_items: int = 2) -> None:
    """Attention heatmaps of a few validation sentences as W&B images."""
    if logger is None:
        return
    import matplotlib.pyplot as plt

    figures = heatmap_figures(module, dm, max_items)
    if figures:
        logger.log_image(key=HEATMAP_KEY, images=figures)
    for fig in figures:
        plt.close(fig)


def heatmap_pngs(module, dm, max_items: int = 2) -> list[bytes]:
    """The heatmaps :func:`log_heatmaps` logs, as PNG files (what W&B makes of a figure), for a
    process without torch to log (a fused member's, :mod:`sweeps.trial.fused.member`)."""
    import matplotlib.pyplot as plt

    pngs = []
    for fig in heatmap_figures(module, dm, max_items):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        pngs.append(buffer.getvalue())
        plt.close(fig)
    return pngs
