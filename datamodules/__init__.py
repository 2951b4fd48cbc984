"""LightningDataModules serving batches per docs/CONTRACTS.md. Needs only torch and lightning.

The classes are imported on first use, so ``python -m datamodules.wmt17 fetch`` and the fetch
module (:mod:`datamodules.wmt17_fetch`, standard library + numpy) load nothing they do not need.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CopyTaskDataModule", "WMT17DataModule"]
_HOMES = {"CopyTaskDataModule": ".copy_task", "WMT17DataModule": ".wmt17"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
