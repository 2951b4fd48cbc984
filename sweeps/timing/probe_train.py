"""The probe's training figures: a training step's seconds and peak memory for an
architecture with random weights, measured before training as the decode probe measures decode
time (:mod:`.probe`), the way the timing stage measures a trained model
(:func:`sweeps.timing.train.measure_train_step`, :func:`sweeps.timing.memory.measure_peaks`): a
copy of the model, the study's first ``train_steps`` training batches, one pinned thread. A step
costs the same trained or not, so a study can take ``train_step_seconds`` or ``train_peak_mb`` as
an objective or a constraint before any trial trains.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def train_cost(
    module: Any,
    dm: Any,
    train_steps: int,
    figures: Iterable[str],
    machine_speed: float | None,
    **timing: Any,
) -> dict[str, Any]:
    """``{"train_step_seconds": ..., "train_peak_mb": ...}`` (those ``figures`` names) of one model
    on CPU; ``timing`` are :func:`~sweeps.timing.train.measure_train_step`'s options."""
    import torch

    from sweeps.timing.memory import measure_peaks
    from sweeps.timing.train import (
        measure_train_step,
        quiet_logging,
        step_runner,
        train_batches,
        trainer_copy,
    )

    cpu = torch.device("cpu")
    figures = set(figures)
    batches = train_batches(dm, train_steps, cpu)
    out: dict[str, Any] = {}
    if "train_step_seconds" in figures:
        t = measure_train_step(module, batches, "cpu", machine_speed=machine_speed, **timing)
        out.update(train_step_seconds=t.step_seconds, train_contended=t.contended)
    if "train_peak_mb" in figures:
        with quiet_logging():
            peaks = measure_peaks(
                lambda: step_runner(*trainer_copy(module, cpu), batches), None, cpu
            )
        out["train_peak_mb"] = peaks.train_peak_mb
    return out


def faster(kept: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Two rounds' figures of one model: the faster round's step time, the later peak."""
    if not kept:
        return new
    out = {**kept, **new}
    if "train_step_seconds" in kept and kept["train_step_seconds"] < new["train_step_seconds"]:
        out.update(
            train_step_seconds=kept["train_step_seconds"], train_contended=kept["train_contended"]
        )
    return out
