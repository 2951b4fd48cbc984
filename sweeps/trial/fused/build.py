"""What a fused group builds for each member as the member's unfused trial would: its data and model
(seeded as :func:`sweeps.trial.fitting.prepare_trial` seeds, so a member starts from its unfused run's
weights and data), and the device the group trains on. The training loop itself is the model
package's (:class:`lightning_modules.fused.loop.FusedLoop`).
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import torch

from sweeps.build import build_datamodule, build_module
from sweeps.spec import TrialPlan


def group_device(gpu_ids: tuple[str, ...]) -> torch.device:
    """Where a group trains: the GPU Ray gave its first member (the group's process holds none
    itself, so it sees the node's GPUs), else the CPU."""
    if gpu_ids and torch.cuda.is_available():
        gid = gpu_ids[0]
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        index = visible.index(gid) if gid in visible else (0 if visible else int(gid))
        return torch.device(f"cuda:{index}")
    return torch.device("cpu")


def build_member(plan: TrialPlan) -> tuple[pl.LightningDataModule, Any]:
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
