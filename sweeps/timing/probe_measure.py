"""The decode probe's measurements, in its pinned process (:mod:`sweeps.timing.probe_child`, which
imports this module once it has pinned itself): each architecture with random weights timed
decoding the study's validation split (:func:`time_models`), and where a study asks, a training
step's seconds and peak memory (:func:`train_cost`), the way the timing stage measures a trained
model (:func:`sweeps.timing.train.measure_train_step`, :func:`sweeps.timing.memory.measure_peaks`):
a copy of the model, the study's first training batches, one pinned thread. A step costs the same
trained or not, so a study can take ``train_step_seconds`` or ``train_peak_mb`` as an objective or
a constraint before any trial trains. Imports torch and Lightning."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from sweeps.build import build_datamodule, build_module
from sweeps.timing.measure import fastest_probe
from sweeps.timing.measure import measure_decode_time as measure
from sweeps.timing.memory import measure_peaks
from sweeps.timing.probe import INTERPOLATED
from sweeps.timing.train import (
    measure_train_step,
    quiet_logging,
    step_runner,
    train_batches,
    trainer_copy,
)


def time_models(
    task: dict[str, Any],
    seed: int,
    models: Iterable[dict[str, Any]],
    threads: int = 1,
    repeats: int = 5,
    precision: float | None = 0.02,
    max_seconds: float = 5.0,
    warmup: int = 1,
    rounds: int = 2,
    calibration_seconds: float = 2.0,
    train: Iterable[str] = (),
    train_steps: int = 4,
) -> Iterable[dict[str, Any]]:
    """Time each model (random weights, seeded) decoding the task's validation split, every batch
    forced to its longest reference's length, in ``rounds`` interleaved rounds (the fastest
    round's median kept, as the timing stage keeps its fastest process's); one entry per model.
    ``train`` names the training figures to measure too (``train_step_seconds``,
    ``train_peak_mb``: :func:`train_cost`, on ``train_steps`` batches)."""
    task = dict(task)
    if "num_workers" in task:
        task["num_workers"] = 0  # every batch is built before timing
    dm = build_datamodule(task, seed)
    dm.setup("fit")
    batches = list(dm.val_dataloader())
    steps = {
        b["src"].data_ptr(): int(b["tgt_lengths"].max()) for b in batches
    }  # a trained model's steps
    models, modules = list(models), []
    for model in models:
        torch.manual_seed(0)
        module = build_module(dict(model), dm)

        def forced(src, src_lengths, module=module):
            n = steps.get(src.data_ptr(), int(src_lengths.max()))
            beam = int(module.hparams.val_beam_size)
            if beam == 1:
                return module.model.greedy_decode(src, src_lengths, max_len=n, min_len=n)[0]
            return module.model.beam_search(
                src,
                src_lengths,
                beam_size=beam,
                max_len=n,
                min_len=n,
                length_penalty=module.hparams.length_penalty,
            )

        module.decode = forced
        modules.append(module)
    best: list = [None] * len(modules)
    costs: list[dict[str, Any]] = [{} for _ in modules]
    train = list(train)
    speed = fastest_probe(
        calibration_seconds
    )  # the machine's speed, once for every model (not once per measurement)
    timing_kw = dict(
        repeats=repeats,
        warmup=warmup,
        threads=threads,
        precision=precision,
        max_seconds=max_seconds,
    )
    for _ in range(
        rounds
    ):  # interleaved rounds: a slow spell of a shared machine falls on all models alike
        for i, module in enumerate(modules):
            t = measure(
                module,
                batches,
                "cpu",
                None,
                repeats,
                warmup,
                threads,
                precision,
                max_seconds,
                machine_speed=speed,
            )
            if best[i] is None or t.decode_seconds < best[i].decode_seconds:
                best[i] = t
            if train:
                got = train_cost(module, dm, train_steps, train, speed, **timing_kw)
                costs[i] = faster(costs[i], got)
    for model, t, cost in zip(models, best, costs):
        yield {
            **cost,
            "model": model,
            "K": model.get(INTERPOLATED),
            "seconds": float(t.decode_seconds),
            "repeats": t.repeats,
            "precision": t.precision,
            "contended": t.contended,
            "sentences": t.sentences,
            "rounds": rounds,
        }


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
