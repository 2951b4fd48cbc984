"""Attention-variant seq2seq models as Lightning modules.

Needs torch, Lightning, sacrebleu, numpy and annotated-types (and imports :mod:`datamodules`, for
the token ids and the range checker); none of Ray, Optuna or W&B.

The names below are imported on first use, so light modules of the package
(:mod:`lightning_modules.presets`) load without torch; ``dir()`` lists them all the same.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ATTENTION_REGISTRY",
    "build_attention",
    "CheckpointError",
    "PRESETS",
    "Seq2Seq",
    "Seq2SeqModule",
    "fastest_precision",
]
_HOMES = {
    "ATTENTION_REGISTRY": ".attention",
    "build_attention": ".attention",
    "CheckpointError": "datamodules.checkpoint_files",
    "PRESETS": ".presets",
    "Seq2Seq": ".seq2seq",
    "Seq2SeqModule": ".module",
    "fastest_precision": ".precision",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
