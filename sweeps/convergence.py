"""An optional stop for a trial whose metric has converged: the spec's ``stop_when`` block.

    stop_when: {metric: val/bleu, at_least: 100, reports: 2}   # BLEU 100 at two reports in a row

A trial whose ``metric`` reached ``at_least`` (or fell to ``at_most``) at ``reports`` validation
reports in a row stops there instead of training to ``max_steps``: its last report carries
``converged: 1`` and its row in results.csv has status ``converged`` (a finished trial, like
``done``: in the tables, the timing stage, Optuna (COMPLETE, not PRUNED) and its W&B run's
``converged`` metric). Checked at ``--dry-run`` like every key (:class:`StopWhenSpec`).

The spec part is pydantic only (the dry run imports no torch); :func:`make_callback` builds the
Lightning callback inside the trial (no Ray, Optuna or W&B here either).
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lightning_modules.metric_names import FIT_METRICS

#: the results.csv status of a trial stopped by this rule, and the metric its reports carry
CONVERGED = "converged"


class StopWhenSpec(BaseModel):
    """Stop a trial once ``metric`` is at least ``at_least`` (or at most ``at_most``) at
    ``reports`` validation reports in a row."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    at_least: Optional[float] = None
    at_most: Optional[float] = None
    reports: int = Field(2, ge=1)

    @field_validator("metric")
    @classmethod
    def _reported(cls, value: str) -> str:
        if value not in FIT_METRICS:
            raise ValueError(f"{value!r} is not a metric the trials report; valid: {', '.join(FIT_METRICS)}")
        return value

    @model_validator(mode="after")
    def _one_bound(self) -> "StopWhenSpec":
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError("give exactly one of at_least (a metric that rises, e.g. val/bleu) "
                             "and at_most (one that falls, e.g. val/loss)")
        return self

    def reached(self, value: float) -> bool:
        return value >= self.at_least if self.at_least is not None else value <= self.at_most  # type: ignore[operator]

    def describe(self) -> str:
        bound = f">= {self.at_least:g}" if self.at_least is not None else f"<= {self.at_most:g}"
        return f"{self.metric} {bound} at {self.reports} report(s) in a row"


def make_callback(spec: StopWhenSpec, flags: dict[str, Any]):
    """A Lightning callback that stops the fit when ``spec`` holds and sets ``flags["converged"]``
    (the report callback's extra metrics, so the report made at the same validation carries it).
    Put it before the report callback in the Trainer's list."""
    import lightning.pytorch as pl
    import torch

    class ConvergenceStop(pl.Callback):
        def __init__(self) -> None:
            self.streak = 0
            flags[CONVERGED] = 0.0

        def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            if trainer.sanity_checking:
                return
            value = trainer.callback_metrics.get(spec.metric)
            if value is None:
                return
            value = float(value.item() if torch.is_tensor(value) else value)
            self.streak = self.streak + 1 if spec.reached(value) else 0
            if self.streak >= spec.reports and trainer.global_step < (trainer.max_steps or 0):
                trainer.should_stop = True
                flags[CONVERGED] = 1.0
                for logger in trainer.loggers:  # the W&B run (and any other logger) records why it ended
                    logger.log_metrics({CONVERGED: 1.0}, step=trainer.global_step)

        def state_dict(self) -> dict[str, Any]:  # a resumed trial keeps its streak
            return {"streak": self.streak}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.streak = int(state_dict.get("streak", 0))

    return ConvergenceStop()
