"""A trial's checkpoints: restoring the newest one that loads (skipping a truncated one for the
one before it) and writing one atomically. Ray Tune keeps them (``storage.keep_checkpoints``);
each folder holds ``checkpoint.ckpt`` and ``trial_state.json`` (:mod:`sweeps.layout`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as pl
import torch

from sweeps.layout import CHECKPOINT_FILE, TRIAL_STATE_FILE


@dataclass
class Restored:
    """What :func:`restore_checkpoint` found: the local Lightning checkpoint to resume from (None:
    start at step 0), the training time already spent, the checkpoint folder used and how many
    newer ones did not load."""

    ckpt_path: str | None = None
    time_offset: float = 0.0
    name: str = ""
    skipped: int = 0


def checkpoint_candidates(checkpoint) -> list:
    """``checkpoint`` (a Ray ``Checkpoint``) and then the older ``checkpoint_NNNNNN`` folders of
    the same trial, newest first, on whatever filesystem holds them (local disk, NFS, a bucket)."""
    import pyarrow.fs

    fs, path = checkpoint.filesystem, checkpoint.path.rstrip("/")
    parent, name = os.path.dirname(path), os.path.basename(path)
    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(parent))
    except OSError:
        infos = []
    older = sorted(
        (
            i.base_name
            for i in infos
            if i.type == pyarrow.fs.FileType.Directory
            and re.fullmatch(r"checkpoint_\d+", i.base_name)
            and i.base_name < name
        ),
        reverse=True,
    )
    return [checkpoint] + [type(checkpoint)(path=f"{parent}/{n}", filesystem=fs) for n in older]


def restore_checkpoint(checkpoint, local_dir: str, log=print) -> Restored:
    """Copy the newest of the trial's checkpoints that loads to ``local_dir``.

    A checkpoint that does not load (truncated by a crash, say) is skipped for the previous one,
    and the log says so; when none loads the trial starts again from step 0 and says that --
    never the same failing restore on every retry."""
    if checkpoint is None:
        return Restored()
    skipped = 0
    for candidate in checkpoint_candidates(checkpoint):
        target = os.path.join(local_dir, CHECKPOINT_FILE)
        try:
            with candidate.as_directory() as d:
                shutil.copy(os.path.join(d, CHECKPOINT_FILE), target)
                extra = Path(d, TRIAL_STATE_FILE)
                time_offset = (
                    float(json.loads(extra.read_text()).get("train_time_s", 0.0))
                    if extra.exists()
                    else 0.0
                )
            torch.load(
                target, map_location="cpu", weights_only=False
            )  # our own file: does it load whole?
        except Exception as exc:  # noqa: BLE001 -- any unreadable checkpoint is skipped the same way
            lines = str(exc).strip().splitlines()
            log(
                f"checkpoint {candidate.path} does not load ({lines[-1] if lines else type(exc).__name__}); "
                f"trying the previous one"
            )
            skipped += 1
            continue
        name = os.path.basename(candidate.path.rstrip("/"))
        if skipped:
            log(
                f"resuming from {candidate.path}, the newest checkpoint that loads ({skipped} newer skipped)"
            )
        return Restored(target, time_offset, name, skipped)
    log(f"none of this trial's {skipped} checkpoint(s) loads: training restarts from step 0")
    return Restored(skipped=skipped)


def save_checkpoint_atomic(trainer: pl.Trainer, path: str) -> None:
    """``trainer.save_checkpoint`` to a temporary name, flushed to disk, then renamed: a crash
    mid-write leaves no half-written ``path``. Collective under DDP (rank 0 writes)."""
    partial = path + ".partial"
    trainer.save_checkpoint(
        partial, weights_only=False
    )  # the whole state: a resumed trial needs its optimiser
    if trainer.is_global_zero:
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)
