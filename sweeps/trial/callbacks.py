"""The Lightning callbacks a trial trains with: the report to Ray after each validation (with a
checkpoint and the validation hypotheses beside it), which ends the fit when Tune stops the trial
(:mod:`sweeps.trial.lifecycle`), and the fault the ``chaos`` block injects.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from ray import tune

from sweeps.errors import ChaosError
from sweeps.layout import (
    CHECKPOINT_FILE,
    HYPOTHESES_FILE,
    REFERENCES_FILE,
    SIGNATURE_FILE,
    TRIAL_STATE_FILE,
)
from sweeps.trial import phases
from sweeps.trial.checkpoints import save_checkpoint_atomic
from sweeps.trial.lifecycle import STOP_REQUESTED
from sweeps.trial.wandb_run import log_reported_training


class TuneReport(pl.Callback):
    """Reports ``trainer.callback_metrics`` to Tune after each validation, with a checkpoint.

    The project's own callback (rather than Ray's) so it always subclasses the same Lightning
    ``Callback`` class as the Trainer in use.
    """

    #: hold the fit's last report until :func:`sweeps.trial.fitting.fit_trial` has logged the
    #: heatmaps and closed the W&B run (:meth:`send_held`). Tune stops a trial at its last report
    #: when a scheduler's ``max_t`` is reached; when that trial is the experiment's last, Tune kills
    #: its actor about 10 s after the stop, and a W&B run still closing is left ``running``.
    hold_last = True

    def __init__(
        self, time_offset: float = 0.0, extra_metrics: dict[str, Any] | None = None
    ) -> None:
        self.time_offset = time_offset
        self.extra_metrics = dict(extra_metrics or {})
        self.start = time.perf_counter()
        self.last_reported_step = -1
        self.fit_over = False  # set by finish_fit: any report from here on is the last
        self.held: tuple[dict[str, Any], str, pl.Trainer] | None = None

    def train_seconds(self) -> float:
        return self.time_offset + time.perf_counter() - self.start

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.report(trainer)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if (
            STOP_REQUESTED.is_set()
        ):  # Tune is stopping this trial between reports (see FinishOnStop)
            raise SystemExit(0)

    def report(self, trainer: pl.Trainer) -> None:
        self.send_held()  # a held report that was not the fit's last after all goes first
        metrics = {
            k: float(v)
            for k, v in trainer.callback_metrics.items()
            if torch.is_tensor(v) and v.numel() == 1
        }
        metrics.update(self.extra_metrics)
        metrics.update(
            step=trainer.global_step, epoch=trainer.current_epoch, train_time_s=self.train_seconds()
        )
        log_reported_training(trainer.loggers, metrics, trainer.global_step)
        tmp: str | None = tempfile.mkdtemp(prefix="trial-report-")
        try:
            with phases.phase("checkpoint"):
                save_checkpoint_atomic(trainer, os.path.join(tmp, CHECKPOINT_FILE))
                if trainer.is_global_zero:
                    Path(tmp, TRIAL_STATE_FILE).write_text(
                        json.dumps({"train_time_s": metrics["train_time_s"]})
                    )
                    write_hypotheses(trainer.lightning_module, tmp)
            if self.hold_last and self.is_last(trainer):
                self.held, tmp = (metrics, tmp, trainer), None
            else:
                with phases.phase(
                    "report"
                ):  # Tune's report: the checkpoint copied into the trial's storage
                    self.send(metrics, tmp, trainer)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        self.last_reported_step = trainer.global_step

    def is_last(self, trainer: pl.Trainer) -> bool:
        """Whether the fit ends after this report: ``max_steps`` reached, a callback stopped it
        (``stop_when``), or the fit is over (the validation :func:`~sweeps.trial.fitting.finish_fit`
        adds)."""
        return (
            self.fit_over
            or trainer.should_stop
            or 0 <= trainer.max_steps <= trainer.global_step  # Lightning's -1: no limit
        )

    def send_held(self) -> None:
        """Hand Tune the report :meth:`report` held, if any (a ``SystemExit`` from Tune's report
        goes on up, as from any report)."""
        if self.held is None:
            return
        (metrics, folder, trainer), self.held = self.held, None
        try:
            with phases.phase("report"):
                self.send(metrics, folder, trainer)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def drop_held(self) -> None:
        """Forget a held report (the trial failed after it: a retry resumes from the report before)."""
        if self.held is not None:
            shutil.rmtree(self.held[1], ignore_errors=True)
            self.held = None

    def send(self, metrics: dict[str, Any], checkpoint_dir: str, trainer: pl.Trainer) -> None:
        """Hand one report to Ray: here Tune's session; :mod:`sweeps.trial.ddp` sends to Ray Train."""
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir))


def write_hypotheses(module: pl.LightningModule, folder: str) -> None:
    """The validation hypotheses and references this report's BLEU was computed from, one sentence
    a line, in the validation set's order, beside the checkpoint (``val_hypotheses.txt``,
    ``val_references.txt``): the report's paired bootstrap between models reads them
    (:mod:`sweeps.report.findings`) without decoding again or importing torch."""
    decoded = getattr(module, "last_decoded", {}).get("val")
    if decoded:
        hyps, refs = decoded
        Path(folder, HYPOTHESES_FILE).write_text("".join(h.replace("\n", " ") + "\n" for h in hyps))
        Path(folder, REFERENCES_FILE).write_text("".join(r.replace("\n", " ") + "\n" for r in refs))
    signature = getattr(module, "last_bleu_signature", None)
    if signature:  # what val/sacrebleu was computed with: a figure is cited with it
        Path(folder, SIGNATURE_FILE).write_text(signature + "\n")


class Chaos(pl.Callback):
    """Raises once at ``step`` (per trial, remembered in a marker file) to test fault tolerance."""

    def __init__(self, step: int, marker: Path) -> None:
        self.step = step
        self.marker = marker

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step and not self.marker.exists():
            self.marker.parent.mkdir(parents=True, exist_ok=True)
            self.marker.write_text("failed once\n")
            raise ChaosError(
                f"chaos: injected failure at step {trainer.global_step} (sweep spec `chaos` block)"
            )
