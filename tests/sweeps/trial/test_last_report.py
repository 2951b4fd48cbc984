"""A trial's last report reaches Tune only after its W&B run is closed: Tune stops a trial at a
scheduler's ``max_t`` (its last report), and at the end of an experiment kills a stopping actor
about 10 s later, which left a W&B run still closing as ``running``. A real Lightning fit of a tiny
copy-task model, with a real offline W&B run; only the hand-over to Ray is recorded instead."""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl
import pytest

from datamodules.copy_task import CopyTaskDataModule
from sweeps.build import build_module, trainer_kwargs
from sweeps.trial.callbacks import TuneReport
from sweeps.trial.fitting import TrialParts, fit_trial
from sweeps.trial.wandb_logger import lightning_logger

pytestmark = pytest.mark.train

COPY = dict(vocab_size=8, max_length=4, train_size=64, val_size=16, batch_size=8)


class Recorded(TuneReport):
    """The project's report callback, its reports kept here instead of handed to Ray: for each,
    the step, whether the W&B run was still open, and the checkpoint's files."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict] = []

    def send(self, metrics, checkpoint_dir, trainer) -> None:
        import wandb

        self.sent.append(
            {
                "step": metrics["step"],
                "wandb_open": wandb.run is not None,
                "files": sorted(os.listdir(checkpoint_dir)),
            }
        )


class StopAt(pl.Callback):
    """Stops the fit at a validation, as the ``stop_when`` callback does."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and trainer.global_step >= self.step:
            trainer.should_stop = True


def fit(tmp_path: Path, max_steps: int, val_every: int, stop_at: int | None = None):
    dm = CopyTaskDataModule(**COPY)
    dm.setup("fit")
    pl.seed_everything(0, verbose=False)
    module = build_module({"preset": "tiny", "attention": "bahdanau", "val_beam_size": 1}, dm)
    report = Recorded()
    callbacks = ([StopAt(stop_at)] if stop_at else []) + [report]
    logger = lightning_logger(
        {"dir": str(tmp_path), "project": "last-report", "id": "t1", "mode": "offline"}
    )
    _ = logger.experiment
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **trainer_kwargs({"max_steps": max_steps, "val_check_interval": val_every}),
    )
    local = tmp_path / "resume"
    local.mkdir()
    parts = TrialParts(dm, module, None, str(local), report, callbacks)
    fit_trial(trainer, parts, logger, heatmaps=True, trial_id="t1")
    return report.sent, tmp_path


@pytest.mark.parametrize(
    "max_steps, val_every, stop_at, steps",
    [
        (6, 3, None, [3, 6]),  # max_steps at a validation
        (7, 3, None, [3, 6, 7]),  # between validations: the validation after the fit
        (9, 3, 3, [3]),  # a callback stopped the fit (stop_when)
    ],
    ids=["max_steps", "after_fit", "stopped"],
)
def test_the_last_report_waits_for_the_wandb_run_to_close(
    tmp_path, max_steps, val_every, stop_at, steps
):
    sent, folder = fit(tmp_path, max_steps, val_every, stop_at)
    assert [s["step"] for s in sent] == steps
    *before, last = sent
    assert all(s["wandb_open"] for s in before), "earlier reports go as they come"
    assert not last["wandb_open"], "the last report went to Tune before its W&B run closed"
    assert "checkpoint.ckpt" in last["files"], last["files"]
    # the run that closed holds the heatmaps, logged before it closed
    (run,) = folder.glob("wandb/offline-run-*")
    assert list(run.glob("files/media/images/val/attention*.png")), "no heatmaps in the W&B run"
