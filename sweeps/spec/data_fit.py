"""Settings that each pass their own checks but do not fit the task's data, which the sizes in the
sweep file tell before Ray starts (the copy task's; WMT's depend on its files): a
``val_check_interval`` past an epoch's training batches while ``check_val_every_n_epoch`` counts
it within one epoch, and an explicit ``model.max_source_len`` below the task's longest source
where the mechanism covers only that many positions. Lightning and the module would refuse both
when every trial starts (:func:`check_data_fit`, called per cell by
:func:`sweeps.spec.validate.validate_cell`)."""

from __future__ import annotations

import math
from typing import Any

from sweeps.spec.schema import SpecError
from sweeps.spec.signatures import longest_source, signatures


def _copy_setting(task: dict[str, Any], key: str) -> Any:
    """The copy task's ``key``: the sweep's, else the datamodule's default."""
    if key in task:
        return task[key]
    found = signatures().datamodules["copy"]
    return found[key][1] if isinstance(found, dict) and key in found else None


def copy_train_batches(task: dict[str, Any]) -> int:
    """Training batches per epoch of the copy task, as its datamodule makes them: every example
    once, the last batch short (``ceil(train_size / batch_size)``, bucketed batches alike)."""
    return math.ceil(_copy_setting(task, "train_size") / _copy_setting(task, "batch_size"))


def copy_longest_source(task: dict[str, Any]) -> int:
    """The copy task's longest source (incl. EOS), its datamodule's ``max_source_len``."""
    return int(_copy_setting(task, "max_length")) + 1


def check_data_fit(
    task: dict[str, Any],
    model: dict[str, Any],
    trainer: dict[str, Any],
    where_of: Any,
    source: str,
    mechanism: tuple[str, dict[str, Any], tuple[int, int]],
) -> None:
    """Raises SpecError where ``trainer`` or ``model`` does not fit the copy task's data.
    ``where_of``: a key's place in the file (a grid's, a searched range's); ``mechanism``: the
    attention, its options (with the module's ``max_source_len`` where it takes one) and its
    (query, memory) sizes, as the trial builds it."""
    if task.get("name") != "copy":
        return
    every, interval = trainer.get("check_val_every_n_epoch"), trainer.get("val_check_interval")
    if every is not None and isinstance(interval, int) and not isinstance(interval, bool):
        batches = copy_train_batches(task)
        limit = trainer.get("limit_train_batches")
        if isinstance(limit, int) and not isinstance(limit, bool):
            batches = min(batches, limit)  # as Lightning cuts the epoch
        elif isinstance(limit, float):
            batches = int(batches * limit)
        if interval > batches:
            raise SpecError(
                where_of("trainer.check_val_every_n_epoch"),
                f"{every!r} makes Lightning count val_check_interval ({interval}) in training "
                f"batches within one epoch, but an epoch has {batches} (train_size "
                f"{_copy_setting(task, 'train_size')} / batch_size "
                f"{_copy_setting(task, 'batch_size')}"
                f"{', cut by limit_train_batches' if limit is not None else ''}); remove "
                f"check_val_every_n_epoch (the interval then counts batches across epochs) or "
                f"give a val_check_interval up to {batches}",
                source,
            )
    given = model.get("max_source_len")
    attention, options, dims = mechanism
    if isinstance(given, int) and not isinstance(given, bool) and "max_source_len" in options:
        data = copy_longest_source(task)
        built = longest_source(attention, options, dims)
        if built is not None and data > built:
            raise SpecError(
                where_of("model.max_source_len"),
                f"{given} is below the copy task's longest source, {data} tokens (max_length "
                f"{data - 1} plus EOS), and attention {attention!r} here covers only "
                f"max_source_len positions; write max_source_len: {data} (or more), or leave it "
                f"out (the trial gives the task's)",
                source,
            )
