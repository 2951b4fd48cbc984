"""The measurement: seconds to decode one whole split with a model, taken alone.

:func:`measure_decode_time` times ``Seq2SeqModule.decode`` (what ``val/decode_seconds`` times during
training: encoder, attention precompute, greedy or beam search) over every batch of a split, the
batches moved to the device first so data loading is not timed: warm-up, then timed repeats, whose
median is the figure (``decode_seconds``), with min/max and the interquartile range as its spread.
On CPU with one thread a pass that shared its core with another process, or ran while the machine
was slow (a fixed pure-Python loop timed after it took longer than its fastest time), is thrown
away and run again (:func:`clean_passes`; the constants below say how much is too much). On a GPU
the timed region is bracketed by ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import torch

from sweeps.errors import TimingError  # noqa: F401 (raised here; importable from here too)
from sweeps.timing.devices import resolve_device
from sweeps.timing.record import DecodeTiming

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
# ... and after a pass on a slow machine, the next waits up to this long for it to recover (never
# past ``max_seconds``: the cap bounds the waits as well as the timed passes).
RECOVERY_WAIT_S = 5.0
MAX_ATTEMPTS_FACTOR = 4  # at most repeats x this timed passes before settling for contended ones
# Adaptive repeats (the stage's default, as torch.utils.benchmark's adaptive_autorange): timed
# repeats go on until the median is known to ``precision`` or ``max_seconds`` of timed decoding
# have passed. A repeat lasts at least MIN_REPEAT_S: a split that decodes in a few milliseconds is
# decoded several times per repeat, so scheduler ticks and timer granularity do not dominate it.
MIN_REPEAT_S = 0.05
MAX_REPEATS = 400


def kept_runs(
    passes: Sequence[tuple[float, Any, Any]], keep: Sequence[bool], repeats: int
) -> tuple[list[float], int, bool]:
    """The wall times of the timed passes that count, how many were thrown away (a shared core, a
    slow machine) and whether too few were clean: then the fastest thrown-away ones fill the
    ``repeats`` (the machine was never quiet for long: what was measured is reported, flagged)."""
    runs = [wall for (wall, _, _), kept in zip(passes, keep) if kept]
    interrupted, contended = len(passes) - len(runs), len(runs) < repeats
    if contended:
        runs += sorted(wall for (wall, _, _), kept in zip(passes, keep) if not kept)[
            : repeats - len(runs)
        ]
    return runs, interrupted, contended


def median_precision(runs: Sequence[float]) -> float:
    """Half-width of the median's notch relative to the median (McGill et al.'s 1.57 x IQR /
    sqrt(n), an approximate 95% interval that covers less than that at a handful of runs); inf
    with fewer than 3 runs."""
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


def clean_passes(
    passes: Sequence[tuple[float, bool, float]], best: float = float("inf")
) -> list[bool]:
    """Which passes to keep, from (wall, shared core, probe after the pass): those that had their
    core to themselves and whose probe was within ``SLOW_MACHINE`` of the fastest probe, that is
    of ``best`` (a calibration) or of the passes' own probes. A faster probe later can disqualify
    passes kept until then."""
    best = min(best, *(probe for _, _, probe in passes))
    return [not shared and probe <= SLOW_MACHINE * best for _, shared, probe in passes]


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
    beam_size: int | None = None,
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = 1,
    precision: float | None = None,
    max_seconds: float = 30.0,
    machine_speed: float | None = None,
    calibration_seconds: float = CALIBRATION_S,
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
            median's notch is within ``precision`` of it (:func:`median_precision`) or
            ``max_seconds`` have passed (timed decoding and the waits for a slow machine to
            recover); the precision reached is recorded.
        machine_speed: the fastest :func:`machine_probe` this process has already seen (a caller
            timing many models in one process, as the decode probe does, calibrates once with
            :func:`fastest_probe`); None: calibrate for ``calibration_seconds`` first.
        calibration_seconds: how long the calibration probes the machine (the fastest probe is
            the speed each pass is judged against).
    Returns:
        the timings, with the settings they were taken under.
    """
    if calibration_seconds <= 0:
        raise TimingError(f"calibration_seconds must be > 0, got {calibration_seconds}")
    if repeats < 1:
        raise TimingError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise TimingError(f"warmup must be >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise TimingError(f"threads must be >= 1, got {threads}")
    beam = int(module.hparams.val_beam_size if beam_size is None else beam_size)
    if beam < 1:
        raise TimingError(f"beam size must be >= 1 (1 = greedy), got {beam}")
    try:
        device = resolve_device(device)
    except ValueError as exc:
        raise TimingError(str(exc)) from None
    module = module.to(device).eval()
    on_device = [
        (b["src"].to(device), b["src_lengths"].to(device)) for b in batches
    ]  # [(B, S), (B,)]
    sentences = sum(int(src.shape[0]) for src, _ in on_device)
    if not sentences:
        raise TimingError("the split has no sentences to decode")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def decode_split() -> list[torch.Tensor]:
        return [module.decode(src, src_lengths) for src, src_lengths in on_device]  # [(B, T')]

    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with _beam_size(module, beam), torch.inference_mode():
            per_repeat = _warm_up(decode_split, sync, warmup, adaptive=precision is not None)
            watch = (
                device.type == "cpu" and torch.get_num_threads() == 1
            )  # thread CPU time = all the work
            passes, keep, reached, stopped_by, outputs = _timed_repeats(
                decode_split,
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
            output_tokens = sum(
                int((t != module.hparams.pad_id).sum()) for t in outputs
            )  # counted after timing
    finally:
        torch.set_num_threads(previous_threads)
    runs, interrupted, contended = kept_runs(passes, keep, repeats)
    timing = DecodeTiming.from_runs(
        runs,
        sentences=sentences,
        output_tokens=output_tokens,
        batches=len(on_device),
        beam_size=beam,
        warmup=warmup,
        device=str(device),
        threads=used_threads,
    )
    return dataclasses.replace(
        timing,
        passes_per_repeat=per_repeat,
        interrupted=interrupted,
        contended=contended,
        precision=None if reached is None or contended else round(reached, 5),
        stopped_by=None if contended else stopped_by,
    )


def _warm_up(
    decode_split: Callable[[], Any], sync: Callable[[], None], warmup: int, adaptive: bool
) -> int:
    """The untimed passes (at least one when adaptive); returns the passes one timed repeat holds:
    1, or adaptive, as many as last ``MIN_REPEAT_S`` by the last warm-up pass's time."""
    per_repeat = 1
    for i in range(max(warmup, 1 if adaptive else 0)):
        sync()
        start = time.perf_counter()
        decode_split()
        sync()
        if adaptive and i == max(warmup, 1) - 1:  # the last warm-up pass sizes a repeat
            per_repeat = max(1, math.ceil(MIN_REPEAT_S / max(time.perf_counter() - start, 1e-6)))
    return per_repeat


def _timed_repeats(
    decode_split: Callable[[], list[torch.Tensor]],
    sync: Callable[[], None],
    watch: bool,
    per_repeat: int,
    repeats: int,
    precision: float | None,
    max_seconds: float,
    machine_speed: float | None = None,
    calibration_seconds: float = CALIBRATION_S,
) -> tuple[
    list[tuple[float, bool, float]], list[bool], float | None, str | None, list[torch.Tensor]
]:
    """The timed repeats and their stop rules (see :func:`measure_decode_time`); returns every
    repeat as (wall per pass, shared core, probe after it), which of them to keep, the precision
    reached and the rule that ended the repeats ("precision", "time cap", "repeat cap"; adaptive
    only) and the last pass's outputs. ``watch``: one CPU thread, so the
    thread's CPU time is all the work and a shared core or a slow machine can be seen."""
    adaptive = precision is not None
    passes: list[tuple[float, bool, float]] = []
    if not watch:
        best = 0.0
    else:  # the machine's speed when not slowed
        best = (
            fastest_probe(calibration_seconds)
            if machine_speed is None
            else min(machine_speed, machine_probe())
        )
    attempts = repeats * (MAX_ATTEMPTS_FACTOR if watch else 1)
    deadline = time.perf_counter() + max_seconds
    reached, stopped_by = None, None
    while True:
        if passes and passes[-1][2] > SLOW_MACHINE * best:  # the last pass met a slow spell
            # the wait counts against the cap: on a host that is slow more often than not, waits
            # of RECOVERY_WAIT_S after every pass took a model's timing from 30 s to 3-7 minutes
            wait = min(RECOVERY_WAIT_S, deadline - time.perf_counter())
            if wait > 0:
                best = wait_for_speed(best, wait)
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
        passes.append(
            (
                wall / per_repeat,
                watch and wall > SHARED_CORE * cpu,
                machine_probe() if watch else 0.0,
            )
        )
        keep = clean_passes(passes, best)
        best = min(best, passes[-1][2])
        clean = [w for (w, _, _), kept in zip(passes, keep) if kept]
        if len(clean) >= repeats:
            if not adaptive:
                break
            reached = median_precision(clean)
            if reached <= precision:
                stopped_by = "precision"
            elif time.perf_counter() > deadline:
                stopped_by = "time cap"
            elif len(passes) >= MAX_REPEATS:
                stopped_by = "repeat cap"
            if stopped_by:
                break
        elif len(passes) >= attempts and (
            not adaptive or time.perf_counter() > deadline or len(passes) >= MAX_REPEATS
        ):
            break  # never enough clean passes: contended
    return passes, keep, reached, stopped_by, outputs
