"""One member's report at a validation, as its unfused trial would make it: what the fused loop's
validation hands back (:class:`lightning_modules.fused.loop.MemberValidation`: the metrics
Lightning's validation logged, the training figures ``train/loss``, ``train/loss_step``,
``train/loss_epoch``, the rows for its W&B run, its checkpoint), with ``step``, ``epoch``,
``train_time_s``, the stop_when rule's ``converged`` (:mod:`sweeps.trial.stop_when`), and the
report folder's files an unfused trial's report callback writes."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lightning_modules.module import Seq2SeqModule
from sweeps.layout import CHECKPOINT_FILE, TRIAL_STATE_FILE
from sweeps.trial.callbacks import write_hypotheses
from sweeps.trial.stop_when import CONVERGED
from sweeps.trial.wandb_logger import heatmap_pngs


@dataclass
class StopCount:
    """The stop_when rule's count for one member: reports in a row that reached its target, and
    whether it has converged (part of the group's state)."""

    streak: int = 0
    converged: bool = False

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)


def member_report(result: Any, stop: StopCount, max_steps: int, setup: Any) -> dict[str, Any]:
    """The report (``step``, ``metrics``, ``final``, ``history``: ``[(step, values)]`` for the
    member's W&B run, ``files``, ``hparams``) of one member's validation ``result``; updates
    ``stop``."""
    step, metrics = result.step, result.metrics
    out = {**metrics, **result.train}
    spec = setup.stop_when
    if spec is not None:
        value = metrics.get(spec.metric)
        if value is not None:
            stop.streak = stop.streak + 1 if spec.reached(value) else 0
            if stop.streak >= spec.reports and step < max_steps:
                stop.converged = True
        out[CONVERGED] = 1.0 if stop.converged else 0.0
    out.update(step=step, epoch=result.epoch, train_time_s=result.train_time_s)
    history = list(result.rows)
    if stop.converged:  # the stop_when callback logs it at the global step
        history.append((step, {CONVERGED: 1.0}))
    return {
        "step": step,
        "metrics": out,
        "final": step >= max_steps or stop.converged,
        "history": history,
        "files": report_files(result),
        "hparams": dict(result.module.hparams),
    }


def report_files(result: Any) -> dict[str, bytes]:
    """A member's report folder as an unfused trial writes it: ``checkpoint.ckpt`` (Lightning's
    format, the loop's), ``trial_state.json`` and the validation hypotheses and references. As
    bytes: the member's trial may run on another node."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, CHECKPOINT_FILE).write_bytes(result.checkpoint)
        Path(tmp, TRIAL_STATE_FILE).write_text(
            json.dumps({"train_time_s": result.train_time_s, "step": result.step})
        )
        write_hypotheses(result.module, tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir()}


def heatmaps(checkpoint: bytes, dm: Any) -> list[bytes]:
    """The attention heatmaps of the model in ``checkpoint`` (a member's report), as its unfused
    trial draws them, as PNG files."""

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, CHECKPOINT_FILE)
        path.write_bytes(checkpoint)
        module = Seq2SeqModule.load_from_checkpoint(str(path), map_location="cpu")
    return heatmap_pngs(module, dm)
