"""LightningDataModules serving batches per docs/CONTRACTS.md.

Needs torch, Lightning, sacrebleu (WMT'17's BLEU scoring), numpy and annotated-types; WMT'17's
tokenizer and detokenizer are the ``data`` extra (sentencepiece, sacremoses; datasets for
``source="hf"``). None of Ray, Optuna or W&B.

The classes are imported on first use, so ``python -m datamodules.wmt17 fetch`` and the fetch
module (:mod:`datamodules.wmt17_fetch`, standard library + numpy) load nothing they do not need.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CheckpointError", "CopyTaskDataModule", "TASKS", "WMT17DataModule", "datamodule_class"]
_HOMES = {
    "CheckpointError": ".checkpoint_files",
    "CopyTaskDataModule": ".copy_task",
    "WMT17DataModule": ".wmt17",
}

#: a sweep file's ``task.name`` -> its datamodule class (the one list of tasks)
TASKS = {"copy": "CopyTaskDataModule", "wmt17": "WMT17DataModule"}


def datamodule_class(task_name: str) -> type:
    """The datamodule class of a task, imported on first use. Raises ValueError naming the valid tasks."""
    if task_name not in TASKS:
        raise ValueError(f"unknown task {task_name!r}; valid: {', '.join(TASKS)}")
    return __getattr__(TASKS[task_name])


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
