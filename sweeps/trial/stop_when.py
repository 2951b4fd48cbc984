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

from typing import Any

from sweeps.spec.search_schema import StopWhenSpec

#: the results.csv status of a trial stopped by this rule, and the metric its reports carry
CONVERGED = "converged"


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
                for (
                    logger
                ) in trainer.loggers:  # the W&B run (and any other logger) records why it ended
                    logger.log_metrics({CONVERGED: 1.0}, step=trainer.global_step)

        def state_dict(self) -> dict[str, Any]:  # a resumed trial keeps its streak
            return {"streak": self.streak}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.streak = int(state_dict.get("streak", 0))

    return ConvergenceStop()
