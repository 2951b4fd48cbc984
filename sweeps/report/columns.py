"""The columns of results.csv, in order: who a row is, the trial's metrics, the timing stage's
and the held-out stage's figures, then the tail (:mod:`sweeps.report.results` writes them)."""

from __future__ import annotations

from typing import Any

from lightning_modules.metric_names import (
    DECODE_SECONDS,
    FIT_METRICS,
    METRICS,
    TRAIN_DISTILL,
    TRAIN_LOSS,
    VAL_BLEU,
)
from sweeps.spec.search_schema import PROBED, estimate_column

# the timing stage's training step and peak memory (sweeps.timing.train, sweeps.timing.memory);
# train_time_s (a TAIL column) is the trial's wall time, shared with the trials beside it
TRAIN_STEP_SECONDS, TRAIN_PEAK_MB = "train_step_seconds", "train_peak_mb"
TIMING_DEVICE = "timing_device"
TRAIN_COLUMNS = [
    TRAIN_STEP_SECONDS,
    "train_step_seconds_iqr",
    estimate_column(TRAIN_STEP_SECONDS),
    "train_tokens_per_second",
    "train_step_repeats",
    "train_step_precision",
    "train_step_interrupted",
    "train_step_contended",
    TRAIN_PEAK_MB,
    estimate_column(TRAIN_PEAK_MB),
    "decode_peak_mb",
    "peak_mb_spread",
]
# decode_seconds: the timing stage's median (the model alone on its node); its spread beside it.
# val/decode_seconds: measured during training, beside other trials: a training-time signal only.
# <figure>_estimate: a multi-objective sweep's probe figure, what its Optuna trial was told
# (sweeps.timing.probe), in sweeps that probe it.
TIMING_COLUMNS = [
    DECODE_SECONDS,
    "decode_seconds_iqr",
    "decode_seconds_min",
    "decode_seconds_max",
    estimate_column(DECODE_SECONDS),
    "decode_repeats",
    "decode_passes_per_repeat",
    "decode_precision",
    "decode_processes",
    "decode_interrupted",
    "decode_contended",
    # where the figures were measured: "cpu" or "cuda", and the processor's or GPU's name
    TIMING_DEVICE,
    "timing_device_name",
    # the settings the figures were taken under: the data split decoded, torch's threads
    "timing_split",
    "timing_threads",
    *TRAIN_COLUMNS,
]
# every metric the module logs during training (val/bleu first), then the timing stage's; a
# student's distillation term beside its training loss (empty for other trials)
METRIC_COLUMNS = [
    VAL_BLEU,
    *TIMING_COLUMNS,
    *(
        n
        for m in FIT_METRICS
        if m != VAL_BLEU
        for n in ((m, TRAIN_DISTILL) if m == TRAIN_LOSS else (m,))
    ),
]
#: the probe's figures (sweeps.timing.probe.add_estimates), in the sweeps that probe them
ESTIMATE_COLUMNS = [estimate_column(n) for n in PROBED]
#: the held-out stage's (sweeps.heldout), after the metrics, in rows that have them: whether the
#: row is the one chosen on validation, and its test figures
HELDOUT_COLUMNS = [
    "chosen",
    "test_split",
    *(METRICS["test"][k] for k in ("bleu", "sacrebleu", "loss", "token_acc")),
    "heldout_error",
]
#: then, after ``attention``, the mechanisms' headline options (:func:`headline_columns`)
FIRST_COLUMNS = [
    "trial_id", "cell", "model", "attention", "length", "seed", "status", "retries", "moved",
]  # fmt: skip
TAIL_COLUMNS = ["train_time_s", "step", "checkpoint", "moved_why", "error", "timing_error"]
#: statuses of a trial that finished (its model is final): ran out its steps, stopped by the
#: scheduler, or converged (stop_when)
FINISHED = ("done", "stopped", "converged")
#: results.csv's mark of a row a warm start reused: the sweep folder it was reused from
REUSED = "reused"

#: results.csv's mark of a relative constraint's baseline model (``of:``), trained in the cell
#: and seed it is the baseline of: a yardstick, never the cell's chosen model
BASELINE = "baseline"


def baseline_mask(df: Any) -> Any:
    """Bool per row of a results frame: the row is a relative constraint's baseline
    (:data:`BASELINE` True as written, or "True" as read back from results.csv). The frame is
    pandas' (this module itself imports none: the launcher's light start reads it)."""
    if BASELINE not in df:
        return df.index.to_series(index=df.index).notna() & False
    return df[BASELINE].astype(str).str.strip().str.lower().isin({"true", "1", "1.0"})
