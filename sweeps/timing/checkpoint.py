"""A checkpoint and its data: find the checkpoint file, read what it stores, rebuild the split it
is timed on, and time it (:func:`time_checkpoint`).

The data come from the checkpoint where it can say: a checkpoint written by ``trainer.fit(model,
datamodule=dm)`` stores the settings of a datamodule that calls ``save_hyperparameters()``
(``CopyTaskDataModule`` and ``WMT17DataModule`` both do), from which the task is recognised.
Where a checkpoint stores none, the data are named (the command's ``--task``, ``--data-dir``,
``--cache-dir`` and ``--data KEY=VALUE``; they also override what a checkpoint stores).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from datamodules import TASKS
from datamodules.checkpoint_files import CheckpointError, checkpoint_problem
from lightning_modules.attention import ATTENTION_REGISTRY
from sweeps.build import build_datamodule
from sweeps.spec.signatures import datamodule_param_types
from sweeps.timing.files import (  # noqa: F401 (re-exported: where they were before)
    SPLITS,
    check_split,
    checkpoint_file,
    checkpoint_fingerprint,
    same_checkpoint,
)
from sweeps.timing.measure import DecodeTiming, TimingError, measure_decode_time

DATAMODULE_SETTINGS_KEY = (
    pl.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY
)  # "datamodule_hyper_parameters"


def load_module(path: str | Path) -> pl.LightningModule:
    """``Seq2SeqModule.load_from_checkpoint`` on the CPU."""
    # torch and Lightning (seconds): the timing stage's driver checks files without them
    from lightning_modules.module import Seq2SeqModule

    file = checkpoint_file(path)
    try:
        return Seq2SeqModule.load_from_checkpoint(str(file), map_location="cpu", weights_only=False)
    except CheckpointError as exc:  # the file says what it is: one line naming it
        raise TimingError(f"{exc}, or train the trial again") from None
    except UNREADABLE as exc:
        raise TimingError(unreadable(file, exc)) from None


#: what torch raises on a file it cannot read as a checkpoint: empty, text, not torch's (the
#: first three), or cut short or damaged on disk (OSError: "[Errno 22] Invalid argument")
UNREADABLE = (EOFError, pickle.UnpicklingError, RuntimeError, OSError)


def unreadable(file: Path, exc: BaseException | None) -> str:
    """What a command says of a checkpoint file torch cannot read (``exc``: one of
    :data:`UNREADABLE`; None: it read, but holds no Lightning checkpoint). A missing file is said
    before it is read. What the file shows it is (empty, text, a zip torch did not write, a
    ``state_dict`` saved alone) is said in the words ``load_from_checkpoint`` uses."""
    if (problem := checkpoint_problem(file)) is not None:
        return f"{problem}, or train the trial again"
    if exc is None:  # a dict with Lightning's keys but no state_dict: not one Lightning wrote
        return (
            f"{file}: a torch file but not a Lightning checkpoint (no state_dict); give a "
            "trial's checkpoint.ckpt (results.csv's checkpoint column) or its folder"
        )
    damaged = (
        "cut short or damaged on disk (a full disk, a copy or a kill while it was written)"
        if isinstance(exc, OSError)
        else "not a checkpoint torch can read"
    )
    return (
        f"{file}: {damaged} ({type(exc).__name__}: {exc}); give a trial's checkpoint.ckpt "
        "(results.csv's checkpoint column) or its folder, or train the trial again"
    )


def read_settings(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's module hyperparameters and its datamodule settings ({} when it was not
    written by ``trainer.fit(model, datamodule=dm)`` or the datamodule saves no hyperparameters)."""
    file = checkpoint_file(path)
    try:
        ckpt = torch.load(file, map_location="cpu", weights_only=False)  # the user's own file
    except UNREADABLE as exc:
        raise TimingError(unreadable(file, exc)) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise TimingError(unreadable(file, None))
    hparams = dict(ckpt.get("hyper_parameters") or {})
    if not hparams:  # load_from_checkpoint would fail on the constructor's missing arguments
        raise TimingError(
            f"{file}: a Lightning checkpoint without the module's settings (hyper_parameters: "
            "saved without save_hyperparameters, or by another module); give a trial's "
            "checkpoint.ckpt (results.csv's checkpoint column) or its folder"
        )
    attention = hparams.get("attention")
    if attention is not None and attention not in ATTENTION_REGISTRY:
        raise TimingError(
            f"{file}: its model's attention {attention!r} is none this version knows (valid: "
            f"{', '.join(sorted(ATTENTION_REGISTRY))}): a checkpoint of another version or "
            "an edited one"
        )
    return hparams, dict(ckpt.get(DATAMODULE_SETTINGS_KEY) or {})


def saved_data_settings(path: str | Path) -> dict[str, Any]:
    """The datamodule settings a checkpoint stores (see :func:`read_settings`)."""
    return read_settings(path)[1]


def infer_task(settings: Mapping[str, Any]) -> str:
    """The task whose datamodule takes every one of ``settings``."""
    fits = [t for t in TASKS if set(settings) <= set(datamodule_param_types(t))]
    if len(fits) != 1:
        raise TimingError(
            f"cannot tell the task from the checkpoint's data settings ({', '.join(sorted(settings))}); "
            f"pass --task ({'|'.join(TASKS)})"
        )
    return fits[0]


#: the data settings the timing command also takes as flags of their own
FLAG_OPTIONS = ("data_dir", "cache_dir")


def data_task(
    settings: Mapping[str, Any],
    task: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A plan-style task section (``{"name": ..., **datamodule settings}``) from a checkpoint's
    saved settings, an optional task name and command-line overrides."""
    overrides = dict(overrides or {})
    if not settings and task is None:
        raise TimingError(
            "the checkpoint holds no datamodule settings (it was not written by trainer.fit(model, "
            "datamodule=dm)); say which data to decode, e.g. --task wmt17 --data-dir DIR, or --task copy"
        )
    if task is not None and task not in TASKS:
        raise TimingError(f"unknown task {task!r}; valid: {', '.join(TASKS)}")
    name = task or infer_task(settings)
    if settings and task is not None and infer_task(settings) != task:
        raise TimingError(
            f"the checkpoint was trained on task {infer_task(settings)!r}, not {task!r}; drop --task"
        )
    valid = datamodule_param_types(name)
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        # --data-dir and --cache-dir arrive here as data_dir and cache_dir: the flag is named
        given = ", ".join(
            f"{k} (--{k.replace('_', '-')})" if k in FLAG_OPTIONS else k for k in unknown
        )
        raise TimingError(
            f"unknown data option(s) {given} for task {name}; drop them (valid: {', '.join(valid)})"
        )
    merged = {**settings, **overrides}
    saved_cache = settings.get("cache_dir")
    if (
        "data_dir" in overrides
        and "cache_dir" not in overrides
        and saved_cache
        and not os.path.isdir(saved_cache)
    ):
        merged["cache_dir"] = None  # the old cache went with the old folder: <data_dir>/.cache
    return {"name": name, **merged}


def split_batches(dm: pl.LightningDataModule, split: str) -> Any:
    """The DataLoader of ``split`` (``valid`` or ``test``) of a datamodule, after ``setup``."""
    check_split(split)
    dm.setup("validate" if split == "valid" else "test")
    try:
        return dm.val_dataloader() if split == "valid" else dm.test_dataloader()
    except (RuntimeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TimingError(
            f"split {split!r} does not exist in this data ({type(dm).__name__}: {first}); time the "
            f"valid split (python -m sweeps.timing --split valid; in a sweep, --set "
            f"timing.split=valid), or give the data a test set (--data test_prefix=newstest2016; "
            f"in a sweep, --set task.test_prefix=newstest2016)"
        ) from None


def check_vocabulary(module: pl.LightningModule, dm: pl.LightningDataModule) -> None:
    """The data's vocabulary must be the one the model was trained on."""
    for side in ("src_vocab_size", "tgt_vocab_size"):
        have, want = getattr(dm, side, None), module.hparams.get(side)
        if have is not None and want is not None and int(have) != int(want):
            raise TimingError(
                f"the data's {side} is {have} but the checkpoint's model has {want}: point --data-dir / "
                f"--cache-dir / --data at the data (and BPE model) the model was trained on"
            )


def load_for_timing(
    checkpoint: str | Path, task: Mapping[str, Any], seed: int = 0, split: str = "valid"
) -> tuple[pl.LightningModule, pl.LightningDataModule, Any]:
    """Load a checkpoint and build the task's datamodule (``sweeps.build.build_datamodule``);
    returns the module, the datamodule and the DataLoader of ``split``."""
    module = load_module(checkpoint)
    task = dict(task)
    if "num_workers" in datamodule_param_types(task["name"]):
        task["num_workers"] = (
            0  # every batch is built before timing: worker processes would only cost
        )
    dm = build_datamodule(task, seed)
    loader = split_batches(dm, split)
    check_vocabulary(module, dm)
    return module, dm, loader


def time_checkpoint(
    checkpoint: str | Path,
    task: Mapping[str, Any],
    seed: int = 0,
    split: str = "valid",
    **options: Any,
) -> DecodeTiming:
    """Load a checkpoint and its data (:func:`load_for_timing`) and
    :func:`~sweeps.timing.measure.measure_decode_time` over one split; ``options`` are that
    function's (device, beam_size, repeats, warmup, threads, precision, max_seconds,
    calibration_seconds). Training cost too: :func:`sweeps.timing.cost.measure_checkpoint`."""
    module, _, loader = load_for_timing(checkpoint, task, seed, split)
    return measure_decode_time(module, loader, **options)
