"""A trained model's costs, measured alone in one process: decode time
(:mod:`sweeps.timing.measure`), the training step (:mod:`sweeps.timing.train`) and peak memory
(:mod:`sweeps.timing.memory`), whichever of them a study's ``timing.measure`` names
(:func:`measure_checkpoint`). Decode time comes first, on the checkpoint's weights; training is
timed on copies of the model, so nothing measured after it sees changed weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from sweeps.errors import TimingError
from sweeps.timing.checkpoint import load_for_timing
from sweeps.timing.devices import resolve_device
from sweeps.timing.measure import _beam_size, measure_decode_time
from sweeps.timing.memory import MemoryPeaks, measure_peaks
from sweeps.timing.record import ModelCost
from sweeps.timing.train import (
    DEFAULT_STEPS,
    measure_train_step,
    quiet_logging,
    step_runner,
    train_batches,
    trainer_copy,
)

MEASURES = ("decode", "train", "memory")


def check_measures(measure: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(measure)
    unknown = [m for m in chosen if m not in MEASURES]
    if unknown or not chosen:
        raise TimingError(
            f"timing.measure {list(chosen)!r}: name one or more of {', '.join(MEASURES)}"
        )
    return chosen


def measure_checkpoint(
    checkpoint: str | Path,
    task: Mapping[str, Any],
    seed: int = 0,
    split: str = "valid",
    measure: Iterable[str] = ("decode",),
    train_steps: int = DEFAULT_STEPS,
    **options: Any,
) -> ModelCost:
    """Load a checkpoint and its data and measure what ``measure`` names: ``decode`` (decode time
    over ``split``), ``train`` (seconds per training step on the first ``train_steps`` batches of
    the training split), ``memory`` (peaks of one such pass of training steps and of decoding the
    split). ``options`` are :func:`~sweeps.timing.measure.measure_decode_time`'s."""
    chosen = check_measures(measure)
    module, dm, loader = load_for_timing(checkpoint, task, seed, split)
    decode = measure_decode_time(module, loader, **options) if "decode" in chosen else None
    if "train" not in chosen and "memory" not in chosen:
        return ModelCost(decode=decode)
    try:
        device = resolve_device(options.get("device", "cpu"))
    except ValueError as exc:
        raise TimingError(str(exc)) from None
    module = module.to(device)
    batches = train_batches(dm, train_steps, device)
    timing_options = {k: v for k, v in options.items() if k != "beam_size"}
    train = measure_train_step(module, batches, **timing_options) if "train" in chosen else None
    memory = None
    if "memory" in chosen:
        beam = int(options.get("beam_size") or module.hparams.val_beam_size)
        memory = _peaks(module, loader, batches, device, beam, options.get("threads", 1))
    return ModelCost(decode=decode, train=train, memory=memory)


def _peaks(module, loader, batches, device, beam: int, threads: int | None) -> MemoryPeaks:
    sources = [(b["src"].to(device), b["src_lengths"].to(device)) for b in loader]
    module.eval()

    def decode() -> None:
        with _beam_size(module, beam), torch.inference_mode():
            for src, lengths in sources:
                module.decode(src, lengths)

    def train():
        clone, optimizer = trainer_copy(module, device)
        return step_runner(clone, optimizer, batches)

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with quiet_logging():
            return measure_peaks(train, decode, device)
    finally:
        torch.set_num_threads(previous)
