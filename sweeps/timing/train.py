"""Training cost measured alone: seconds per training step of a trained model, under the rules of
decode time (:mod:`sweeps.timing.measure`).

:func:`measure_train_step` times what one optimisation step of the sweep costs -- the module's
``training_step`` (forward, the loss), ``backward`` and the sweep's optimiser step
(``configure_optimizers``: Adam at the study's learning rate) -- on the first ``steps`` batches of
the study's training data at its batch size, moved to the device first, on a deep copy of the
model (the loaded checkpoint and the module that is decoded are never changed). A timed pass is
those ``steps`` steps; warm-up, timed repeats and their stop rules are decode time's
(``_warm_up``/``_timed_repeats``: a repeat on a shared core or a slow machine is thrown away and
run again, adaptive repeats until the median is known to ``precision``), so the figure
(``step_seconds``, the median pass / ``steps``) is trusted as decode time is. Gradient clipping
(one norm over the parameters) is not part of the timed step.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import torch

from sweeps.errors import TimingError
from sweeps.timing.devices import resolve_device
from sweeps.timing.measure import CALIBRATION_S, _timed_repeats, _warm_up, kept_runs
from sweeps.timing.record import TrainTiming, run_spread

DEFAULT_STEPS = 4


def train_batches(dm: pl.LightningDataModule, steps: int, device: torch.device) -> list[dict]:
    """The first ``steps`` batches of the datamodule's training split, on ``device``."""
    if steps < 1:
        raise TimingError(f"train_steps must be >= 1, got {steps}")
    dm.setup("fit")
    batches = [
        {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
        for b in itertools.islice(iter(dm.train_dataloader()), steps)
    ]
    if not batches:
        raise TimingError("the training split has no batches to time a training step on")
    return batches


def trainer_copy(
    module: pl.LightningModule, device: torch.device
) -> tuple[pl.LightningModule, torch.optim.Optimizer]:
    """A deep copy of ``module`` in training mode on ``device`` and a fresh optimiser for it (the
    module's own ``configure_optimizers``)."""
    clone = copy.deepcopy(module).to(device).train()
    optimizer = clone.configure_optimizers()
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TimingError(
            "timing a training step needs configure_optimizers() to return one optimiser, "
            f"got {type(optimizer).__name__}"
        )
    return clone, optimizer


def step_runner(
    module: pl.LightningModule, optimizer: torch.optim.Optimizer, batches: Sequence[dict]
) -> Callable[[], list]:
    """A callable running one training step per batch (``training_step``, backward, optimiser
    step), as Lightning's automatic optimisation does."""

    def run() -> list:
        for i, batch in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)
            loss = module.training_step(batch, i)
            loss.backward()
            optimizer.step()
        return []

    return run


@contextmanager
def quiet_logging() -> Iterator[None]:
    """``self.log`` without a Trainer warns and does nothing: silenced during the measurement."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        warnings.filterwarnings("ignore", message=".*self.trainer.*")
        yield


def measure_train_step(
    module: pl.LightningModule,
    batches: Iterable[Mapping[str, Any]],
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = 1,
    precision: float | None = None,
    max_seconds: float = 30.0,
    machine_speed: float | None = None,
    calibration_seconds: float = CALIBRATION_S,
) -> TrainTiming:
    """Time training steps of a copy of ``module`` on ``batches`` (see the module docstring; the
    options are :func:`~sweeps.timing.measure.measure_decode_time`'s)."""
    if repeats < 1:
        raise TimingError(f"repeats must be >= 1, got {repeats}")
    if threads is not None and threads < 1:
        raise TimingError(f"threads must be >= 1, got {threads}")
    try:
        device = resolve_device(device)
    except ValueError as exc:
        raise TimingError(str(exc)) from None
    on_device = [
        {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
        for b in batches
    ]
    if not on_device:
        raise TimingError("no training batches to time")
    pad = module.hparams.pad_id
    tokens = sum(int((b["tgt"] != pad).sum()) for b in on_device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with quiet_logging():
            clone, optimizer = trainer_copy(module, device)
            run = step_runner(clone, optimizer, on_device)
            per_repeat = _warm_up(run, sync, warmup, adaptive=precision is not None)
            watch = device.type == "cpu" and torch.get_num_threads() == 1
            passes, keep, reached, stopped_by, _ = _timed_repeats(
                run,
                sync,
                watch,
                per_repeat,
                repeats,
                precision,
                max_seconds,
                machine_speed,
                calibration_seconds,
            )
            used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous_threads)
    runs, interrupted, contended = kept_runs(passes, keep, repeats)
    steps = len(on_device)
    per_step = tuple(r / steps for r in runs)
    spread = run_spread(per_step)
    median = spread.pop("median")
    return TrainTiming(
        step_seconds=median,
        **spread,
        seconds=per_step,
        tokens_per_second=tokens / (median * steps),
        tokens_per_step=tokens / steps,
        steps=steps,
        batch_size=int(on_device[0]["src"].shape[0]),
        warmup=warmup,
        device=str(device),
        threads=used_threads,
        torch_version=torch.__version__,
        interrupted=interrupted,
        contended=contended,
        passes_per_repeat=per_repeat,
        precision=None if reached is None or contended else round(reached, 5),
        stopped_by=None if contended else stopped_by,
    )
