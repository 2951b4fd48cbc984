"""One member's report at a validation, as its unfused trial would make it: the metrics Lightning's
validation logged, the training loss as Lightning's logging reports it (``train/loss``,
``train/loss_step``, ``train/loss_epoch``), ``step``, ``epoch``, ``train_time_s``, the stop_when
rule's ``converged`` (:mod:`sweeps.trial.stop_when`), and the W&B history since the last report."""

from __future__ import annotations

from typing import Any

from sweeps.trial.fused.steps import Counts
from sweeps.trial.stop_when import CONVERGED


def member_report(
    counts: Counts,
    metrics: dict[str, float],
    step: int,
    epoch: int,
    train_time_s: float,
    max_steps: int,
    setup: Any,
) -> dict[str, Any]:
    """The report (``step``, ``metrics``, ``final``, ``history``: ``[(step, values)]`` for the
    member's W&B run); updates ``counts`` (its history is handed over and cleared)."""
    out = dict(metrics)
    if counts.last_loss is not None:
        out["train/loss"] = out["train/loss_step"] = counts.last_loss
    if counts.epoch_mean is not None:
        out["train/loss_epoch"] = counts.epoch_mean
    spec = setup.stop_when
    if spec is not None:
        value = metrics.get(spec.metric)
        if value is not None:
            counts.streak = counts.streak + 1 if spec.reached(value) else 0
            if counts.streak >= spec.reports and step < max_steps:
                counts.converged = True
        out[CONVERGED] = 1.0 if counts.converged else 0.0
    out.update(step=step, epoch=epoch, train_time_s=train_time_s)
    # W&B steps as Lightning's logger counts them: batches stepped before the one in progress
    history = counts.history + [(step - 1, {**metrics, "epoch": epoch})]
    final = step >= max_steps or counts.converged
    if counts.converged:  # the stop_when callback logs it at the global step
        history.append((step, {CONVERGED: 1.0}))
    counts.history = []
    return {"step": step, "metrics": out, "final": final, "history": history}
