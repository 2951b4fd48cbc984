"""Decode time measured alone: the paper's decode-time figure for a trained checkpoint.

Run it (from the repository root):

    python -m sweeps.timing CKPT                              # the checkpoint's own data, validation split
    python -m sweeps.timing CKPT --split test --beam 10 --repeats 5 --threads 1
    python -m sweeps.timing CKPT --device cuda --json timing.json
    # Britz et al.'s Table 3: WMT'17 en-de newstest2015 (2,169 sentences), beam 10
    python -m sweeps.timing CKPT --split valid --beam 10 --task wmt17 --data-dir data/wmt17/en-de \
        --data vocab_size=16000

``CKPT`` is a Lightning checkpoint, or a folder holding one ``.ckpt`` (a sweep trial's checkpoint).
The data come from the checkpoint where it can say: a checkpoint written by ``trainer.fit(model,
datamodule=dm)`` stores the settings of a datamodule that calls ``save_hyperparameters()``
(``CopyTaskDataModule`` does), from which the task is recognised. ``WMT17DataModule`` does not
(yet), so for WMT checkpoints name the data: ``--task wmt17``, ``--data-dir``, ``--cache-dir`` and
``--data KEY=VALUE`` for any other setting the model was trained with (they also override what a
checkpoint stores).

What is timed (:func:`measure_decode_time`): ``Seq2SeqModule.decode`` -- the decoding that
``val/decode_seconds`` times during training (encoder, attention precompute, greedy or beam search)
-- over every batch of the split. The batches are built and moved to the device first, so data
loading is not timed; one untimed warm-up pass over the split (``--warmup``), then ``--repeats``
timed passes; the median is the figure, with min/max and the interquartile range as its spread.
On CPU with one thread, a pass is thrown away and run again, up to 4x ``--repeats`` passes in all,
when its wall time exceeds its thread's CPU time by 10 % (another process shared the core), or when
the machine ran slow while it ran: a fixed pure-Python loop timed after every pass took 15 % longer
than its fastest time in this measurement, including 2 s of it before the passes (on a shared VM
host the whole machine slows for seconds at a time while the process keeps its core; after such a
pass the next waits up to 5 s for the machine to recover). The count is recorded (``interrupted``), and
``contended`` says when too few clean passes came.
On CPU torch uses a fixed number of threads (``--threads``, default 1, as
``benchmarks/decode_speed.py``); on a GPU the timed region is bracketed by
``torch.cuda.synchronize()``.

In a sweep, :func:`run_timing_stage` times each finished trial's checkpoint after the Tune run, as
one Ray task per trial that holds a whole node's CPUs (or one whole GPU and the node's CPUs per
GPU), so nothing else runs beside it; it writes ``timing.json`` next to the trial's results and
skips trials already timed for the same checkpoint (so ``--resume`` never times a trial twice).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import (Annotated, Any, Callable, Iterable, Iterator, Literal, Mapping, Optional, Sequence, get_args,
                    get_origin, get_type_hints)

import lightning.pytorch as pl
import torch
from annotated_types import Ge

from .build import build_datamodule
from .files import write_atomic
from .study.signatures import TASK_CLASSES, datamodule_param_types

__all__ = [
    "DecodeTiming", "TimingError", "TimingJob", "TimingOutcome", "TimingRecord", "TimingSettings",
    "measure_decode_time", "time_checkpoint", "run_timing_stage", "read_record", "TIMING_FILE",
]

TIMING_FILE = "timing.json"
SPLITS = ("valid", "test")
TASKS = tuple(TASK_CLASSES)  # the task names sweeps.build.datamodule_class knows
DATAMODULE_SETTINGS_KEY = pl.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY  # "datamodule_hyper_parameters"


class TimingError(ValueError):
    """Bad input to the timing measurement, stage or command; the message names the fix."""


# ----------------------------------------------------------------------------------------------
# The measurement


@dataclass(frozen=True)
class DecodeTiming:
    """Seconds to decode one whole split, over repeated timed passes (see :func:`measure_decode_time`)."""

    median_seconds: float
    min_seconds: float
    max_seconds: float
    q1_seconds: float
    q3_seconds: float
    seconds: tuple[float, ...]  # every timed pass, in order
    per_sentence_seconds: float  # median / sentences
    sentences: int
    output_tokens: int  # tokens decoded over the split, EOS included (a model that stops early decodes less)
    batches: int
    beam_size: int
    warmup: int
    device: str
    threads: int  # torch intra-op threads during the timed passes
    torch_version: str
    cpus: tuple[int, ...] = ()  # the CPUs the timed process was pinned to (empty: not pinned)
    interrupted: int = 0  # timed passes thrown away and run again: core shared or machine slow (see clean_passes)
    contended: bool = False  # too few clean passes: the figure includes some of the thrown-away ones
    passes_per_repeat: int = 1  # decodes of the split in one timed repeat (short splits: see measure_decode_time)
    precision: Optional[float] = None  # the median's 95% interval half-width / median, when it was the stop rule
    process_medians: tuple[float, ...] = ()  # one median per fresh timing process; the figure is the fastest's

    @property
    def repeats(self) -> int:
        return len(self.seconds)

    @property
    def iqr_seconds(self) -> float:
        return self.q3_seconds - self.q1_seconds

    @classmethod
    def from_runs(
        cls, seconds: Sequence[float], *, sentences: int, output_tokens: int, batches: int, beam_size: int,
        warmup: int, device: str, threads: int,
    ) -> "DecodeTiming":
        runs = tuple(float(s) for s in seconds)
        q1, _, q3 = statistics.quantiles(runs, n=4, method="inclusive") if len(runs) > 1 else runs * 3
        median = statistics.median(runs)
        return cls(
            median_seconds=median, min_seconds=min(runs), max_seconds=max(runs), q1_seconds=q1,
            q3_seconds=q3, seconds=runs, per_sentence_seconds=median / sentences, sentences=sentences,
            output_tokens=output_tokens, batches=batches, beam_size=beam_size, warmup=warmup, device=device,
            threads=threads, torch_version=torch.__version__,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": list(self.seconds), "cpus": list(self.cpus),
                "process_medians": list(self.process_medians), "repeats": self.repeats,
                "iqr_seconds": self.iqr_seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DecodeTiming":
        names = cls.__dataclass_fields__
        return cls(**{k: (tuple(v) if k in ("seconds", "cpus", "process_medians") else v)
                      for k, v in data.items() if k in names})


# A CPU pass with one torch thread whose wall time exceeds its thread's CPU time by this factor
# was taken off its core part of the time (another process ran there). On the idle 2-core VM a
# pass's wall / CPU ratio was <= 1.08 (40 passes); with two busy processes beside it, 1.74-2.06.
SHARED_CORE = 1.10
# A pass after which the probe loop (machine_probe) took this many times its fastest time ran
# while the machine was slow. Idle, 300 probes of ~2.5 ms were within 1.12x of the fastest at the
# 99th percentile (max 1.22); in the slow spells seen after a sweep's Tune run, probes took
# 1.3-1.6x and the decode passes 1.45-1.6x, with wall = CPU time; at 1.25 milder spells (passes
# 1.2x) still got through. An idle pass thrown away now and then only costs a re-run.
SLOW_MACHINE = 1.15
PROBE_LOOPS = 50_000
# The machine's speed is the fastest probe over this long before the passes (a slow spell can
# outlast a whole quick measurement, so the passes' own probes are not enough) ...
CALIBRATION_S = 2.0
# ... and after a pass on a slow machine, the next waits up to this long for it to recover.
RECOVERY_WAIT_S = 5.0
MAX_ATTEMPTS_FACTOR = 4  # at most repeats x this timed passes before settling for contended ones
# Adaptive repeats (the stage's default, as torch.utils.benchmark's adaptive_autorange): timed
# repeats go on until the median is known to ``precision`` or ``max_seconds`` of timed decoding
# have passed. A repeat lasts at least MIN_REPEAT_S: a split that decodes in a few milliseconds is
# decoded several times per repeat, so scheduler ticks and timer granularity do not dominate it.
MIN_REPEAT_S = 0.05
MAX_REPEATS = 400


def median_precision(runs: Sequence[float]) -> float:
    """Half-width of the median's 95% confidence interval relative to the median (McGill et al.'s
    notch, 1.57 x IQR / sqrt(n)); inf with fewer than 3 runs."""
    if len(runs) < 3:
        return float("inf")
    q1, median, q3 = statistics.quantiles(runs, n=4, method="inclusive")
    return 1.57 * (q3 - q1) / len(runs) ** 0.5 / median if median > 0 else float("inf")


def machine_probe() -> float:
    """Seconds for a fixed pure-Python loop (about 2.5 ms on a 2-core Xeon VM): how fast the CPU
    runs right now, to compare with the same loop at other moments of one measurement."""
    start = time.perf_counter()
    total = 0
    for i in range(PROBE_LOOPS):
        total += i * i
    return time.perf_counter() - start


def fastest_probe(seconds: float) -> float:
    """The fastest :func:`machine_probe` over ``seconds`` of probing (at least one probe)."""
    stop, best = time.perf_counter() + seconds, machine_probe()
    while time.perf_counter() < stop:
        best = min(best, machine_probe())
    return best


def wait_for_speed(best: float, limit_s: float) -> float:
    """Probe until the machine runs within ``SLOW_MACHINE`` of ``best`` again, at most ``limit_s``
    seconds; returns the fastest probe seen (``best`` or faster)."""
    stop = time.perf_counter() + limit_s
    while time.perf_counter() < stop:
        probe = machine_probe()
        best = min(best, probe)
        if probe <= SLOW_MACHINE * best:
            break
    return best


def clean_passes(passes: Sequence[tuple[float, bool, float]], best: float = float("inf")) -> list[bool]:
    """Which passes to keep, from (wall, shared core, probe after the pass): those that had their
    core to themselves and whose probe was within ``SLOW_MACHINE`` of the fastest probe, that is
    of ``best`` (a calibration) or of the passes' own probes. A faster probe later can disqualify
    passes kept until then."""
    best = min(best, *(probe for _, _, probe in passes))
    return [not shared and probe <= SLOW_MACHINE * best for _, shared, probe in passes]


def resolve_device(name: str | torch.device) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TimingError(f"unknown device {name!r}; use cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TimingError(f"device {name!s} asked for, but torch sees no CUDA device; use cpu")
    return device


@contextmanager
def _beam_size(module: pl.LightningModule, beam_size: int) -> Iterator[None]:
    """``Seq2SeqModule.decode`` reads its beam from ``hparams.val_beam_size``: set it for the
    measurement and put the checkpoint's value back afterwards."""
    saved = module.hparams.val_beam_size
    module.hparams.val_beam_size = beam_size
    try:
        yield
    finally:
        module.hparams.val_beam_size = saved


def measure_decode_time(
    module: pl.LightningModule,
    batches: Iterable[Mapping[str, Any]],
    device: str | torch.device = "cpu",
    beam_size: Optional[int] = None,
    repeats: int = 5,
    warmup: int = 1,
    threads: Optional[int] = 1,
    precision: Optional[float] = None,
    max_seconds: float = 30.0,
) -> DecodeTiming:
    """Time ``module.decode`` over a whole split, data loading excluded.

    Args:
        module: a ``Seq2SeqModule`` (e.g. ``Seq2SeqModule.load_from_checkpoint(path)``); it is put
            in eval mode and moved to ``device``.
        batches: the split's batches (a DataLoader); iterated once, every batch moved to
            ``device`` before anything is timed.
        device: ``cpu`` or ``cuda[:N]``.
        beam_size: 1 greedy, more beam search; None: the module's ``val_beam_size``.
        repeats: timed passes over the split (the median is the figure). On CPU with one thread,
            a pass that did not have its core to itself (wall > ``SHARED_CORE`` x its CPU time) or
            ran while the machine was slow (:func:`clean_passes`) is discarded and run again, at
            most ``MAX_ATTEMPTS_FACTOR`` x repeats passes in all.
        warmup: untimed passes first (allocator, caches, lazy initialisation).
        threads: torch intra-op threads during the measurement (restored afterwards); None keeps
            the current setting.
        precision: None: exactly ``repeats`` clean repeats of one pass each. A fraction (0.02):
            adaptive -- each repeat decodes the split as many times as it takes to last
            ``MIN_REPEAT_S`` (seconds are per pass), and repeats go on past ``repeats`` until the
            median's 95% interval is within ``precision`` of it (:func:`median_precision`) or
            ``max_seconds`` of timed decoding have passed; the precision reached is recorded.
    Returns:
        the timings, with the settings they were taken under.
    """
    if repeats < 1:
        raise TimingError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise TimingError(f"warmup must be >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise TimingError(f"threads must be >= 1, got {threads}")
    beam = int(module.hparams.val_beam_size if beam_size is None else beam_size)
    if beam < 1:
        raise TimingError(f"beam size must be >= 1 (1 = greedy), got {beam}")
    device = resolve_device(device)
    module = module.to(device).eval()
    on_device = [(b["src"].to(device), b["src_lengths"].to(device)) for b in batches]  # [(B, S), (B,)]
    sentences = sum(int(src.shape[0]) for src, _ in on_device)
    if not sentences:
        raise TimingError("the split has no sentences to decode")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def decode_split() -> list[torch.Tensor]:
        return [module.decode(src, src_lengths) for src, src_lengths in on_device]  # [(B, T')]

    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    adaptive = precision is not None
    try:
        with _beam_size(module, beam), torch.inference_mode():
            per_repeat = 1
            for i in range(max(warmup, 1 if adaptive else 0)):
                sync()
                start = time.perf_counter()
                decode_split()
                sync()
                if adaptive and i == max(warmup, 1) - 1:  # the last warm-up pass sizes a repeat
                    per_repeat = max(1, math.ceil(MIN_REPEAT_S / max(time.perf_counter() - start, 1e-6)))
            passes: list[tuple[float, bool, float]] = []  # (wall per decode, shared core, probe after it)
            watch = device.type == "cpu" and torch.get_num_threads() == 1  # thread CPU time = all the work
            best = fastest_probe(CALIBRATION_S) if watch else 0.0  # the machine's speed when not slowed
            attempts = repeats * (MAX_ATTEMPTS_FACTOR if watch else 1)
            deadline = time.perf_counter() + max_seconds
            reached = None
            while True:
                if passes and passes[-1][2] > SLOW_MACHINE * best:  # the last pass met a slow spell
                    best = wait_for_speed(best, RECOVERY_WAIT_S)
                if watch and per_repeat > 1:
                    # the probe just ran through the caches: a short split's first pass after it would be
                    # slower than the rest, and more so the fewer passes a repeat holds (3: +8%, 6: +4%)
                    decode_split()
                sync()
                cpu_start, start = time.thread_time(), time.perf_counter()
                for _ in range(per_repeat):
                    outputs = decode_split()
                sync()
                wall, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
                passes.append((wall / per_repeat, watch and wall > SHARED_CORE * cpu, machine_probe() if watch else 0.0))
                keep = clean_passes(passes, best)
                best = min(best, passes[-1][2])
                clean = [w for (w, _, _), kept in zip(passes, keep) if kept]
                if len(clean) >= repeats:
                    if not adaptive:
                        break
                    reached = median_precision(clean)
                    if reached <= precision or time.perf_counter() > deadline or len(passes) >= MAX_REPEATS:
                        break
                elif len(passes) >= attempts and (not adaptive or time.perf_counter() > deadline
                                                  or len(passes) >= MAX_REPEATS):
                    break  # never enough clean passes: contended
            runs = [wall for (wall, _, _), kept in zip(passes, keep) if kept]
            interrupted, contended = len(passes) - len(runs), len(runs) < repeats
            if contended:  # the machine was never quiet for long: report what was measured, flagged
                runs += sorted(wall for (wall, _, _), kept in zip(passes, keep) if not kept)[: repeats - len(runs)]
            used_threads = torch.get_num_threads()
            pad_id = module.hparams.pad_id
            output_tokens = sum(int((tokens != pad_id).sum()) for tokens in outputs)  # counted after timing
    finally:
        torch.set_num_threads(previous_threads)
    timing = DecodeTiming.from_runs(
        runs, sentences=sentences, output_tokens=output_tokens, batches=len(on_device), beam_size=beam,
        warmup=warmup, device=str(device), threads=used_threads,
    )
    timing = dataclasses.replace(timing, passes_per_repeat=per_repeat,
                                 precision=None if reached is None or contended else round(reached, 5))
    return dataclasses.replace(timing, interrupted=interrupted, contended=contended)


# ----------------------------------------------------------------------------------------------
# Checkpoint and data


def checkpoint_file(path: str | Path) -> Path:
    """The Lightning checkpoint file: ``path`` itself, or the one ``.ckpt`` file inside a folder
    (a sweep trial's checkpoint folder holds ``checkpoint.ckpt``)."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.glob("*.ckpt"))
        if len(found) != 1:
            held = f"{len(found)} .ckpt files ({', '.join(f.name for f in found)})" if found else "no .ckpt file"
            raise TimingError(f"checkpoint folder {p} holds {held}; pass the .ckpt file itself")
        return found[0]
    if not p.is_file():
        raise TimingError(f"checkpoint {p} not found; pass a Lightning .ckpt file or a trial's checkpoint folder")
    return p


def checkpoint_fingerprint(path: str | Path) -> str:
    """Identifies one checkpoint file's content cheaply (resolved path, size, modification time)."""
    f = checkpoint_file(path).resolve()
    st = f.stat()
    return f"{f}:{st.st_size}:{st.st_mtime_ns}"


def load_module(path: str | Path) -> pl.LightningModule:
    """``Seq2SeqModule.load_from_checkpoint`` on the CPU."""
    from lightning_modules.module import Seq2SeqModule

    return Seq2SeqModule.load_from_checkpoint(str(checkpoint_file(path)), map_location="cpu", weights_only=False)


def read_settings(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's module hyperparameters and its datamodule settings ({} when it was not
    written by ``trainer.fit(model, datamodule=dm)`` or the datamodule saves no hyperparameters)."""
    ckpt = torch.load(checkpoint_file(path), map_location="cpu", weights_only=False)  # the user's own file
    return dict(ckpt.get("hyper_parameters") or {}), dict(ckpt.get(DATAMODULE_SETTINGS_KEY) or {})


def saved_data_settings(path: str | Path) -> dict[str, Any]:
    """The datamodule settings a checkpoint stores (see :func:`read_settings`)."""
    return read_settings(path)[1]


def infer_task(settings: Mapping[str, Any]) -> str:
    """The task whose datamodule takes every one of ``settings``."""
    fits = [t for t in TASKS if set(settings) <= set(datamodule_param_types(t))]
    if len(fits) != 1:
        raise TimingError(
            f"cannot tell the task from the checkpoint's data settings ({', '.join(sorted(settings))}); "
            f"pass --task ({'|'.join(TASKS)})"
        )
    return fits[0]


def data_task(
    settings: Mapping[str, Any],
    task: Optional[str] = None,
    overrides: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """A plan-style task section (``{"name": ..., **datamodule settings}``) from a checkpoint's
    saved settings, an optional task name and command-line overrides."""
    overrides = dict(overrides or {})
    if not settings and task is None:
        raise TimingError(
            "the checkpoint holds no datamodule settings (it was not written by trainer.fit(model, "
            "datamodule=dm)); say which data to decode, e.g. --task wmt17 --data-dir DIR, or --task copy"
        )
    if task is not None and task not in TASKS:
        raise TimingError(f"unknown task {task!r}; valid: {', '.join(TASKS)}")
    name = task or infer_task(settings)
    if settings and task is not None and infer_task(settings) != task:
        raise TimingError(f"the checkpoint was trained on task {infer_task(settings)!r}, not {task!r}; drop --task")
    valid = datamodule_param_types(name)
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise TimingError(f"unknown data option(s) {', '.join(unknown)} for task {name}; valid: {', '.join(valid)}")
    merged = {**settings, **overrides}
    saved_cache = settings.get("cache_dir")
    if "data_dir" in overrides and "cache_dir" not in overrides and saved_cache and not os.path.isdir(saved_cache):
        merged["cache_dir"] = None  # the old cache went with the old folder: <data_dir>/.cache
    return {"name": name, **merged}


def split_batches(dm: pl.LightningDataModule, split: str) -> Any:
    """The DataLoader of ``split`` (``valid`` or ``test``) of a datamodule, after ``setup``."""
    if split not in SPLITS:
        raise TimingError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    dm.setup("validate" if split == "valid" else "test")
    try:
        return dm.val_dataloader() if split == "valid" else dm.test_dataloader()
    except (RuntimeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TimingError(
            f"split {split!r} does not exist in this data ({type(dm).__name__}: {first}); use --split valid, "
            f"or configure a test set (e.g. --data test_prefix=newstest2016)"
        ) from None


def check_vocabulary(module: pl.LightningModule, dm: pl.LightningDataModule) -> None:
    """The data's vocabulary must be the one the model was trained on."""
    for side in ("src_vocab_size", "tgt_vocab_size"):
        have, want = getattr(dm, side, None), module.hparams.get(side)
        if have is not None and want is not None and int(have) != int(want):
            raise TimingError(
                f"the data's {side} is {have} but the checkpoint's model has {want}: point --data-dir / "
                f"--cache-dir / --data at the data (and BPE model) the model was trained on"
            )


def time_checkpoint(
    checkpoint: str | Path,
    task: Mapping[str, Any],
    seed: int = 0,
    split: str = "valid",
    device: str = "cpu",
    beam_size: Optional[int] = None,
    repeats: int = 5,
    warmup: int = 1,
    threads: Optional[int] = 1,
    precision: Optional[float] = None,
    max_seconds: float = 30.0,
) -> DecodeTiming:
    """Load a checkpoint, build the task's datamodule (``sweeps.build.build_datamodule``) and
    :func:`measure_decode_time` over one split."""
    module = load_module(checkpoint)
    task = dict(task)
    if "num_workers" in datamodule_param_types(task["name"]):
        task["num_workers"] = 0  # every batch is built before timing: worker processes would only cost
    dm = build_datamodule(task, seed)
    loader = split_batches(dm, split)
    check_vocabulary(module, dm)
    return measure_decode_time(module, loader, device, beam_size, repeats, warmup, threads, precision, max_seconds)


# ----------------------------------------------------------------------------------------------
# The stage: each trial timed alone, one Ray task per trial holding a whole node (or GPU)


@dataclass(frozen=True)
class TimingJob:
    """One finished trial to time.

    Args:
        trial_id: the trial's id (written into the result).
        checkpoint: its final Lightning checkpoint: a ``.ckpt`` file or a folder holding
            ``checkpoint.ckpt`` (a path every node can read).
        task: the trial plan's task section (``{"name": "copy", "max_length": 10, ...}``).
        output_dir: where ``timing.json`` is written (the trial's results folder).
        seed: the trial's seed (generated data such as the copy task's depend on it).
        beam_size: None: the checkpoint's ``val_beam_size`` (the study's beam).
        split: ``valid`` or ``test``.
    """

    trial_id: str
    checkpoint: str
    task: dict[str, Any]
    output_dir: str
    seed: int = 0
    beam_size: Optional[int] = None
    split: str = "valid"

    @property
    def result_path(self) -> Path:
        return Path(self.output_dir) / TIMING_FILE


@dataclass(frozen=True)
class TimingSettings:
    """Stage-wide settings: ``repeats`` timed passes after ``warmup`` untimed ones, ``threads``
    torch threads, ``device`` ``auto`` (a GPU per job where the cluster has GPUs), ``cpu`` or ``cuda``.
    The ranges are the ``Annotated`` markers, checked on construction."""

    repeats: Annotated[int, Ge(1)] = 5
    warmup: Annotated[int, Ge(0)] = 1
    threads: Annotated[int, Ge(1)] = 1
    precision: Optional[float] = 0.02  # adaptive repeats to this precision (None: exactly `repeats`)
    max_seconds: float = 30.0  # adaptive: timed decoding per trial at most this long
    device: Literal["auto", "cpu", "cuda"] = "auto"
    fresh_process: bool = True  # on CPU: time in a new process pinned to `threads` CPUs (see run_job)
    processes: Annotated[int, Ge(1)] = 3  # with fresh_process: that many processes, one after another

    def __post_init__(self) -> None:
        for name, hint in get_type_hints(type(self), include_extras=True).items():
            value = getattr(self, name)
            for marker in getattr(hint, "__metadata__", ()):
                if isinstance(marker, Ge) and not value >= marker.ge:
                    raise TimingError(f"timing {name} must be >= {marker.ge}, got {value}")
            if get_origin(hint) is Literal and value not in get_args(hint):
                raise TimingError(f"timing {name} must be one of {', '.join(get_args(hint))}, got {value!r}")


@dataclass(frozen=True)
class TimingRecord:
    """What ``timing.json`` holds: the timing and where and on what it was taken."""

    trial_id: str
    checkpoint: str
    fingerprint: str
    split: str
    timing: DecodeTiming
    node_id: str
    hostname: str
    reserved_cpus: float
    reserved_gpus: float
    started_at: float  # unix time the job started (model loading included)
    finished_at: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "timing": self.timing.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TimingRecord":
        names = cls.__dataclass_fields__
        kw = {k: v for k, v in data.items() if k in names}
        kw["timing"] = DecodeTiming.from_dict(data["timing"])
        return cls(**kw)


@dataclass(frozen=True)
class TimingOutcome:
    """One job's fate in a stage run: ``timed``, ``skipped`` (already timed) or ``error``."""

    job: TimingJob
    status: str
    record: Optional[TimingRecord] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class Lane:
    """Where one timing job at a time runs: a node, holding ``cpus`` CPUs and ``gpus`` GPUs there."""

    node_id: str
    cpus: float
    gpus: float = 0.0
    device: str = "cpu"


def read_record(path: str | Path) -> Optional[TimingRecord]:
    """A ``timing.json`` (or the one in a folder), or None when missing or unreadable."""
    p = Path(path)
    p = p / TIMING_FILE if p.is_dir() else p
    try:
        return TimingRecord.from_dict(json.loads(p.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def already_timed(job: TimingJob) -> Optional[TimingRecord]:
    """The job's existing record when it is for the same checkpoint file, split and beam size."""
    record = read_record(job.result_path)
    if record is None:
        return None
    try:
        same_checkpoint = record.fingerprint == checkpoint_fingerprint(job.checkpoint)
    except TimingError:
        return None
    same_beam = job.beam_size is None or job.beam_size == record.timing.beam_size
    return record if same_checkpoint and same_beam and record.split == job.split else None


def write_json_atomic(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write JSON so that a reader sees the old file or the whole new one, never half of it."""
    return write_atomic(path, json.dumps(data, indent=2))


def plan_lanes(nodes: Sequence[Mapping[str, Any]], use_gpu: bool) -> list[Lane]:
    """One lane per alive node holding all its CPUs, or with ``use_gpu`` one lane per GPU holding
    that GPU and the node's CPUs divided by its GPUs. ``nodes`` as ``ray.nodes()`` returns them."""
    lanes = []
    for node in nodes:
        if not node.get("Alive"):
            continue
        res = node.get("Resources") or {}
        cpus, gpus = float(res.get("CPU", 0)), int(res.get("GPU", 0))
        if use_gpu:
            share = float(int(cpus // gpus)) if gpus else 0.0
            lanes += [Lane(node["NodeID"], share, 1.0, "cuda") for _ in range(gpus)]
        elif cpus >= 1:
            lanes.append(Lane(node["NodeID"], cpus, 0.0, "cpu"))
    return lanes


def run_job(job: TimingJob, settings: TimingSettings, lane: Lane) -> TimingRecord:
    """Time one job here and now (the body of the stage's Ray task).

    On a CPU lane with ``settings.fresh_process`` the measurement runs in a new Python process
    pinned to ``settings.threads`` of the lane's CPUs (:func:`time_checkpoint_pinned`), not in this
    Ray worker: on a 2-core VM an unpinned decode in a Ray worker (a dozen threads of its own)
    landed in one of two speeds per process, 0.015 or 0.023 s for the same split, so two runs of
    one study disagreed by up to 50 %; pinned, a lone process keeps to one core and its cache.

    Pinned processes still differ: six fresh processes timing one checkpoint gave medians from
    0.0077 to 0.0089 s, each known to +-1 %, one of them slow for its whole life. So the job runs
    ``settings.processes`` of them one after another and keeps the fastest process's timing (each
    process's median in ``process_medians``): a process in a slow mode measures the machine's
    state, not the model."""
    import ray

    started = time.time()
    fingerprint = checkpoint_fingerprint(job.checkpoint)
    kwargs = dict(seed=job.seed, split=job.split, device=lane.device, beam_size=job.beam_size,
                  repeats=settings.repeats, warmup=settings.warmup, threads=settings.threads,
                  precision=settings.precision, max_seconds=settings.max_seconds)
    if settings.fresh_process and lane.device == "cpu":
        timings = [time_checkpoint_pinned(job.checkpoint, job.task, **kwargs) for _ in range(settings.processes)]
        timing = dataclasses.replace(min(timings, key=lambda t: t.median_seconds),
                                     process_medians=tuple(t.median_seconds for t in timings))
    else:
        timing = time_checkpoint(job.checkpoint, job.task, **kwargs)
    return TimingRecord(
        trial_id=job.trial_id, checkpoint=str(job.checkpoint), fingerprint=fingerprint, split=job.split,
        timing=timing, node_id=ray.get_runtime_context().get_node_id(), hostname=socket.gethostname(),
        reserved_cpus=lane.cpus, reserved_gpus=lane.gpus, started_at=started, finished_at=time.time(),
    )


# What the pinned process runs: pin first (before torch starts any thread), then time, then print.
_PINNED_CHILD = """
import json, os, sys
args = json.loads(sys.stdin.read())
os.sched_setaffinity(0, set(args["cpus"]))
from sweeps.timing import time_checkpoint
timing = time_checkpoint(args["checkpoint"], args["task"], **args["kwargs"])
print("TIMING " + json.dumps(timing.to_dict()))
"""


def pick_cpus(count: int, allowed: Optional[Iterable[int]] = None) -> list[int]:
    """``count`` CPUs to pin a timing process to: the highest-numbered of ``allowed`` (default:
    this process's), away from CPU 0 where interrupts and system daemons tend to run."""
    pool = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if count > len(pool):
        raise TimingError(f"timing threads={count} but only {len(pool)} CPU(s) are available here; lower timing.threads")
    return pool[-count:]


def time_checkpoint_pinned(checkpoint: str | Path, task: Mapping[str, Any], **kwargs: Any) -> DecodeTiming:
    """:func:`time_checkpoint` in a new Python process pinned to ``kwargs["threads"]`` CPUs
    (:func:`pick_cpus`). CPU only; the timing comes back with the CPUs it ran on."""
    threads = int(kwargs.get("threads") or 1)
    cpus = pick_cpus(threads)
    root = str(Path(__file__).resolve().parents[1])  # sweeps/, lightning_modules/, datamodules/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    request = json.dumps({"cpus": cpus, "checkpoint": str(checkpoint), "task": dict(task), "kwargs": kwargs})
    done = subprocess.run([sys.executable, "-c", _PINNED_CHILD], input=request, capture_output=True, text=True, env=env)
    lines = done.stdout.splitlines()
    found = [ln[len("TIMING "):] for ln in lines if ln.startswith("TIMING ")]
    if done.returncode != 0 or not found:
        errors = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        raise TimingError(f"the timing process failed (exit {done.returncode}): {errors[-1] if errors else 'no output'}")
    return dataclasses.replace(DecodeTiming.from_dict(json.loads(found[-1])), cpus=tuple(cpus))


def run_timing_stage(
    jobs: Sequence[TimingJob],
    settings: TimingSettings = TimingSettings(),
    log: Optional[Callable[[str], None]] = print,
) -> list[TimingOutcome]:
    """Time every job alone on the connected Ray cluster; returns one outcome per job, in order.

    Call after the Tune run, with Ray initialised. Each job is a Ray task pinned to one lane (see
    :func:`plan_lanes`): a whole node's CPUs, or one GPU with its share of the node's CPUs, so no
    other Ray work shares its cores or GPU and lanes run one job at a time. Jobs whose
    ``timing.json`` already matches their checkpoint are skipped; a failed job is reported and the
    others go on. ``timing.json`` is written by the driver, atomically.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        raise TimingError("run_timing_stage needs a running Ray: call ray.init() (or the launcher's init_ray) first")
    say = log or (lambda _msg: None)
    outcomes: dict[int, TimingOutcome] = {}
    pending: deque[int] = deque()
    for i, job in enumerate(jobs):
        if job.split not in SPLITS:
            outcomes[i] = TimingOutcome(job, "error", error=f"unknown split {job.split!r}; valid: {', '.join(SPLITS)}")
            continue
        try:
            record = already_timed(job)
            checkpoint_file(job.checkpoint)
        except TimingError as exc:
            outcomes[i] = TimingOutcome(job, "error", error=str(exc))
            continue
        if record is not None:
            outcomes[i] = TimingOutcome(job, "skipped", record=record)
            say(f"[timing] trial {job.trial_id}: already timed for this checkpoint ({job.result_path})")
        else:
            pending.append(i)
    for i, outcome in outcomes.items():
        if outcome.status == "error":
            say(f"[timing] trial {outcome.job.trial_id}: {outcome.error}")
    if pending:
        total, free_now = ray.cluster_resources(), ray.available_resources()
        lanes = _lanes(settings, ray.nodes(), total)
        if free_now.get("CPU", 0) < total.get("CPU", 0):
            say(f"[timing] {free_now.get('CPU', 0):g} of {total.get('CPU', 0):g} CPUs are free: each timing job "
                f"waits until its whole node is (is other Ray work still running?)")
        task = ray.remote(max_retries=0)(run_job)
        free = deque(lanes)
        running: dict[Any, tuple[int, Lane]] = {}
        while pending or running:
            while free and pending:
                lane, i = free.popleft(), pending.popleft()
                ref = task.options(
                    num_cpus=lane.cpus, num_gpus=lane.gpus,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(lane.node_id, soft=False),
                ).remote(jobs[i], settings, lane)
                running[ref] = (i, lane)
            done, _ = ray.wait(list(running), num_returns=1)
            i, lane = running.pop(done[0])
            free.append(lane)
            job = jobs[i]
            try:
                record: TimingRecord = ray.get(done[0])
            except Exception as exc:  # one failed job must not lose the others' timings
                message = _last_line(exc)
                outcomes[i] = TimingOutcome(job, "error", error=message)
                say(f"[timing] trial {job.trial_id}: failed: {message}")
                continue
            write_json_atomic(job.result_path, record.to_dict())
            outcomes[i] = TimingOutcome(job, "timed", record=record)
            t = record.timing
            say(f"[timing] trial {job.trial_id}: {t.median_seconds:.4f} s (median of {repeats_note(t)}; "
                f"{t.sentences} sentences, beam {t.beam_size}, {t.device}, {t.threads} thread(s)"
                f"{shared_core_note(t)}) -> {job.result_path}")
    return [outcomes[i] for i in range(len(jobs))]


def repeats_note(t: DecodeTiming) -> str:
    """``21 repeats of 8 passes, +-0.9%, fastest of 3 processes``: how a timing's median was taken."""
    passes = f" of {t.passes_per_repeat} passes" if t.passes_per_repeat > 1 else ""
    reached = f", median +-{100 * t.precision:.1f}% (95%)" if t.precision is not None else ""
    processes = (f", fastest of {len(t.process_medians)} processes "
                 f"({'/'.join(f'{m:.4f}' for m in t.process_medians)})") if len(t.process_medians) > 1 else ""
    return f"{t.repeats} repeats{passes}{reached}{processes}"


def shared_core_note(t: DecodeTiming) -> str:
    """What the log says about passes thrown away and run again ("" when none were)."""
    if t.contended:
        return (f"; WARNING: {t.interrupted} passes found the core shared with other work or the machine running "
                f"slow, too many to run again, so the median includes some of them: time it again on a quiet machine")
    return f"; {t.interrupted} pass(es) on a shared core or a slow machine run again" if t.interrupted else ""


def _lanes(settings: TimingSettings, nodes: Sequence[Mapping[str, Any]], total: Mapping[str, float]) -> list[Lane]:
    has_gpu = float(total.get("GPU", 0)) > 0
    if settings.device == "cuda" and not has_gpu:
        raise TimingError("timing device cuda asked for, but the Ray cluster has no GPU; use cpu or auto")
    lanes = plan_lanes(nodes, use_gpu=settings.device == "cuda" or (settings.device == "auto" and has_gpu))
    if not lanes:
        raise TimingError("no alive Ray node with a CPU (or GPU) to time on")
    return lanes


def _last_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the task's own exception
    lines = str(cause).strip().splitlines()
    return (lines[-1] if lines else type(cause).__name__)[:300]


# ----------------------------------------------------------------------------------------------
# The command


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sweeps.timing",
        description="Time decoding a whole split with a checkpoint: alone, data loading excluded, "
                    "median of repeated runs after a warm-up.",
    )
    p.add_argument("checkpoint", help="a Lightning .ckpt file, or a trial's checkpoint folder")
    p.add_argument("--split", default="valid", help="valid (default) or test")
    p.add_argument("--beam", type=int, default=None,
                   help="beam size; 1 = greedy (default: the checkpoint's val_beam_size)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats over the split, at least (default 5)")
    p.add_argument("--precision", type=float, default=0.02,
                   help="repeat until the median's 95%% interval is within this fraction of it (default 0.02); "
                        "0: exactly --repeats passes")
    p.add_argument("--max-seconds", type=float, default=30.0,
                   help="with --precision: stop after this many seconds of timed decoding (default 30)")
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first (default 1)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--task", default=None, choices=TASKS,
                   help="the data's task; needed only when the checkpoint stores no datamodule settings")
    p.add_argument("--data-dir", default=None,
                   help="where the data files are now (WMT), if not where the checkpoint says")
    p.add_argument("--cache-dir", default=None, help="the BPE/token cache folder (WMT)")
    p.add_argument("--data", action="append", default=[], metavar="KEY=VALUE",
                   help="any datamodule setting, e.g. --data eval_batch_size=64 (repeatable)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the result as JSON")
    return p.parse_args(argv)


def _data_overrides(args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in args.data:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TimingError(f"--data {item!r}: expected KEY=VALUE, e.g. --data eval_batch_size=64")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""  # KEY= : the empty string
        except yaml.YAMLError:
            raise TimingError(f"--data {item!r}: cannot parse the value {value!r}") from None
    if args.data_dir is not None:
        out["data_dir"] = str(Path(args.data_dir).resolve())
    if args.cache_dir is not None:
        out["cache_dir"] = str(Path(args.cache_dir).resolve())
    return out


def describe(task: Mapping[str, Any]) -> str:
    if task["name"] == "wmt17":
        return f"wmt17 {task.get('pair', 'en-de')} ({task.get('data_dir')})"
    settings = ", ".join(f"{k}={task[k]}" for k in ("max_length", "val_size", "test_size", "seed") if k in task)
    return f"{task['name']} ({settings})"


def report_lines(timing: DecodeTiming, split: str) -> list[str]:
    """The command's summary of one timing."""
    t = timing
    return [
        f"split        {split}: {t.sentences} sentences in {t.batches} batches (moved to {t.device} before timing), "
        f"{t.output_tokens} tokens decoded",
        f"settings     beam {t.beam_size}{' (greedy)' if t.beam_size == 1 else ''}, device {t.device}, "
        f"{t.threads} thread(s), torch {t.torch_version}; {t.warmup} warm-up + {t.repeats} timed runs",
        f"whole split  {t.median_seconds:.4f} s  (median of {repeats_note(t)}; min {t.min_seconds:.4f}, "
        f"max {t.max_seconds:.4f}, IQR {t.iqr_seconds:.4f}{shared_core_note(t)})",
        f"per sentence {1000 * t.per_sentence_seconds:.3f} ms",
        "runs (s)     " + " ".join(f"{s:.4f}" for s in t.seconds),
    ]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        if args.split not in SPLITS:
            raise TimingError(f"unknown split {args.split!r}; valid: {', '.join(SPLITS)}")
        overrides = _data_overrides(args)
        ckpt = checkpoint_file(args.checkpoint)
        hparams, saved = read_settings(ckpt)
        task = data_task(saved, args.task, overrides)
        print(f"checkpoint   {ckpt} (attention {hparams.get('attention')}; data {describe(task)})", flush=True)
        timing = time_checkpoint(ckpt, task, int(task.get("seed") or 0), args.split, args.device, args.beam,
                                 args.repeats, args.warmup, args.threads, args.precision or None, args.max_seconds)
    except TimingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, TypeError) as exc:  # the datamodule's own checks
        lines = str(exc).strip().splitlines()
        print(f"error: {lines[0] if lines else type(exc).__name__} (see --help for the data options)", file=sys.stderr)
        return 2
    print("\n".join(report_lines(timing, args.split)))
    if args.json:
        write_json_atomic(args.json, {"checkpoint": str(ckpt), "split": args.split, "task": task, **timing.to_dict()})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
