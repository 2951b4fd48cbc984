"""A trial's timing-stage figures written into its results row: decode time
(:func:`attach_timing`), the training step and the peaks (:func:`attach_train_cost`); the columns
are :data:`sweeps.report.results.TIMING_COLUMNS`."""

from __future__ import annotations

from typing import Any


def attach_timing(
    row: dict[str, Any], timing: dict[str, Any] | None, error: str | None = None
) -> None:
    """Write one trial's isolated decode timing (a ``DecodeTiming.to_dict()``) into its row, or
    the timing stage's error into ``timing_error``."""
    if timing is not None:
        row.update(
            decode_seconds=timing["decode_seconds"],
            decode_seconds_iqr=timing["iqr_seconds"],
            decode_seconds_min=timing["min_seconds"],
            decode_seconds_max=timing["max_seconds"],
            decode_repeats=timing["repeats"],
            decode_passes_per_repeat=timing.get("passes_per_repeat", 1),
            decode_precision=timing.get("precision"),
            decode_processes=len(timing.get("process_medians") or []) or 1,
            decode_interrupted=timing.get("interrupted", 0),
            decode_contended=bool(timing.get("contended", False)),
            timing_device=timing.get("device"),
            timing_device_name=timing.get("device_name"),  # absent from records before it was kept
        )
    if error is not None:
        row["timing_error"] = error


def attach_train_cost(
    row: dict[str, Any], train: dict[str, Any] | None, memory: dict[str, Any] | None
) -> None:
    """Write one trial's isolated training step (a ``TrainTiming.to_dict()``) and peak memory (a
    ``MemoryPeaks.to_dict()``) into its row; ``peak_mb_spread``: the widest max - min of the peaks
    over the fresh processes that measured them."""
    if train is not None:
        row.update(
            train_step_seconds=train["step_seconds"],
            train_step_seconds_iqr=train["iqr_seconds"],
            train_tokens_per_second=train["tokens_per_second"],
            train_step_repeats=train["repeats"],
            train_step_precision=train.get("precision"),
            train_step_interrupted=train.get("interrupted", 0),
            train_step_contended=bool(train.get("contended", False)),
        )
    for record in (train, memory):  # a study that did not time decoding still says where
        if record is not None and row.get("timing_device") is None:
            row["timing_device"] = record.get("device")
    if memory is not None:
        samples = [s for k in ("train_samples", "decode_samples") if (s := memory.get(k))]
        row.update(
            train_peak_mb=memory.get("train_peak_mb"),
            decode_peak_mb=memory.get("decode_peak_mb"),
            peak_mb_spread=max((max(s) - min(s) for s in samples), default=0.0),
        )
