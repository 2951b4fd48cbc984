"""What a fused group does for each member as the member's unfused trial would: build its data and
model (seeded as :func:`sweeps.trial.kit.prepare_trial` seeds, so a member starts from its unfused
run's weights and data), serve its training batches in Lightning's order (resumable), validate it
through Lightning's own validation (so ``val/bleu`` and the rest come from the same code), and
write its checkpoint in Lightning's format (``Seq2SeqModule.load_from_checkpoint`` loads it as a
plain model) with the files an unfused trial's report folder holds.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from sweeps.build import build_datamodule, build_module
from sweeps.layout import CHECKPOINT_FILE, TRIAL_STATE_FILE
from sweeps.spec import TrialPlan
from sweeps.trial.callbacks import write_hypotheses


def group_device(gpu_ids: tuple[str, ...]) -> tuple[torch.device, str, Any]:
    """Where a group trains: the GPU Ray gave its first member (the group's process holds none
    itself, so it sees the node's GPUs), else the CPU; with Lightning's accelerator and devices."""
    if gpu_ids and torch.cuda.is_available():
        gid = gpu_ids[0]
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        index = visible.index(gid) if gid in visible else (0 if visible else int(gid))
        return torch.device(f"cuda:{index}"), "gpu", [index]
    return torch.device("cpu"), "cpu", 1


def build_member(plan: TrialPlan) -> tuple[pl.LightningDataModule, pl.LightningModule]:
    """A member's datamodule (set up) and module, seeded as its unfused trial's."""
    pl.seed_everything(plan.seed, workers=True, verbose=False)
    dm = member_data(plan)
    return dm, build_module(plan.model, dm)


def member_data(plan: TrialPlan) -> pl.LightningDataModule:
    """A member's datamodule, set up for training (its seed draws its data)."""
    dm = build_datamodule(plan.task, plan.seed)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def fused_precision(precision: Any) -> str:
    """The fused model's name for a Lightning precision the fused loop runs
    (:data:`sweeps.plan.fusion.FUSED_PRECISIONS`)."""
    return "bf16-mixed" if str(precision) == "bf16-mixed" else "32-true"


class Batches:
    """A member's training batches in the order Lightning's fit loop draws them: its datamodule's
    train loader, epoch after epoch (the order a function of the seed and the epoch), with its
    position saved in the group's state (a ``ResumableDataLoader``'s ``state_dict``)."""

    def __init__(self, loader: Any, state: dict[str, int] | None = None) -> None:
        self.loader = loader
        self._restart(state or {"epoch": 0, "batches": 0})

    def _restart(self, state: dict[str, int]) -> None:
        self.loader.load_state_dict(state)
        self._it = iter(self.loader)

    def next(self) -> dict[str, Any]:
        try:
            return next(self._it)
        except StopIteration:  # the epoch is over: the next one, as Lightning's set_epoch would
            self._restart({"epoch": self.epoch + 1, "batches": 0})
            return next(self._it)

    @property
    def epoch(self) -> int:
        return int(self.loader.state_dict()["epoch"])

    @property
    def epoch_done(self) -> bool:
        """Whether the last batch drawn was its epoch's last."""
        return int(self.loader.state_dict()["batches"]) >= len(self.loader)

    def state_dict(self) -> dict[str, int]:
        return dict(self.loader.state_dict())


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


@dataclass
class Counts:
    """What a member's reports count between validations, as Lightning's logging would: the last
    step's loss (``train/loss``), the last finished epoch's mean (``train/loss_epoch``, weighted by
    batch size), the W&B history since the last report, the stop_when streak and the training time."""

    last_loss: float | None = None
    epoch_sum: float = 0.0
    epoch_n: int = 0
    epoch_mean: float | None = None
    streak: int = 0
    converged: bool = False
    time_offset: float = 0.0
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "history"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


@dataclass
class Member:
    """One member as the group sees it."""

    j: int
    trial_id: str
    plan: Any
    last_step: int  # its trial's last report when it joined (-1: none)
    ack: int = -1  # the last step its trial has handed to Tune
    published: int = -1
    reports: list[dict] = field(default_factory=list)
    left: bool = False
    final: bool = False
    released: bool = False
    dm: Any = None
    batches: Batches | None = None
    trainer: Any = None
    counts: Counts = field(default_factory=Counts)


def validator(plan: TrialPlan, accelerator: str, devices: Any) -> pl.Trainer:
    """The Lightning Trainer a member is validated with: the unfused trial's validation settings,
    nothing logged, saved or printed."""
    kwargs: dict[str, Any] = {}
    for key in ("limit_val_batches", "precision"):
        if plan.trainer.get(key) is not None:
            kwargs[key] = plan.trainer[key]
    return pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def validate(
    trainer: pl.Trainer, module: pl.LightningModule, dm: pl.LightningDataModule
) -> dict[str, float]:
    """Lightning's validation of one member: the metrics it logs (``val/bleu`` ...)."""
    trainer.validate(module, datamodule=dm, verbose=False)
    return {
        k: float(v)
        for k, v in trainer.callback_metrics.items()
        if torch.is_tensor(v) and v.numel() == 1
    }


def member_files(
    trainer: pl.Trainer,
    module: pl.LightningModule,
    step: int,
    epoch: int,
    optimizer_state: dict[str, Any],
    train_time_s: float,
) -> dict[str, bytes]:
    """A member's report folder as an unfused trial writes it: ``checkpoint.ckpt`` (Lightning's
    format, written by ``trainer.save_checkpoint`` after the validation, with the training step,
    epoch and the member's Adam state written in), ``trial_state.json`` and the validation
    hypotheses and references. As bytes: the member's trial may run on another node."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, CHECKPOINT_FILE)
        trainer.save_checkpoint(path, weights_only=False)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        ckpt.update(global_step=step, epoch=epoch, optimizer_states=[optimizer_state])
        torch.save(ckpt, path)
        Path(tmp, TRIAL_STATE_FILE).write_text(
            json.dumps({"train_time_s": train_time_s, "step": step})
        )
        write_hypotheses(module, tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir()}


def heatmaps(checkpoint: bytes, dm: pl.LightningDataModule) -> list[bytes]:
    """The attention heatmaps of the model in ``checkpoint`` (a member's report), as its unfused
    trial draws them, as PNG files."""
    from lightning_modules.module import Seq2SeqModule
    from sweeps.trial.wandb_logger import heatmap_pngs

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, CHECKPOINT_FILE)
        path.write_bytes(checkpoint)
        module = Seq2SeqModule.load_from_checkpoint(str(path), map_location="cpu")
    return heatmap_pngs(module, dm)
