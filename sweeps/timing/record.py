"""What a timing is (:class:`DecodeTiming`, and how the log and the command describe it) and how it
is kept: ``timing.json`` beside each trial (:class:`TimingRecord`), or the command's ``--json``."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweeps.layout import TIMING_FILE, write_atomic
from sweeps.timing.devices import device_name
from sweeps.timing.memory import MemoryPeaks

# The figure is ``decode_seconds`` from the measurement to results.md, timing.json included; files
# written before it had that name call it ``median_seconds``, still read (a --resume reuses them).
OLD_FIGURE_KEY = "median_seconds"


def run_spread(runs: Sequence[float]) -> dict[str, float]:
    """The median of a timing's kept runs, with their fastest, slowest and quartiles (inclusive;
    a single run is all of them), under the record's field names."""
    q1, _, q3 = (
        statistics.quantiles(runs, n=4, method="inclusive") if len(runs) > 1 else (runs[0],) * 3
    )
    return {
        "median": statistics.median(runs),
        "min_seconds": min(runs),
        "max_seconds": max(runs),
        "q1_seconds": q1,
        "q3_seconds": q3,
    }


@dataclass(frozen=True)
class DecodeTiming:
    """Seconds to decode one whole split, over repeated timed passes
    (:func:`sweeps.timing.measure.measure_decode_time`)."""

    decode_seconds: float  # the figure: the median of the kept passes
    min_seconds: float
    max_seconds: float
    q1_seconds: float
    q3_seconds: float
    seconds: tuple[float, ...]  # every timed pass, in order
    per_sentence_seconds: float  # median / sentences
    sentences: int
    output_tokens: (
        int  # tokens decoded over the split, EOS included (a model that stops early decodes less)
    )
    batches: int
    beam_size: int
    warmup: int
    device: str
    threads: int  # torch intra-op threads during the timed passes
    torch_version: str
    cpus: tuple[int, ...] = ()  # the CPUs the timed process was pinned to (empty: not pinned)
    interrupted: int = (
        0  # timed passes thrown away and run again: core shared or machine slow (see clean_passes)
    )
    contended: bool = (
        False  # too few clean passes: the figure includes some of the thrown-away ones
    )
    passes_per_repeat: int = (
        1  # decodes of the split in one timed repeat (short splits: see measure_decode_time)
    )
    precision: float | None = (
        None  # the median's notch half-width / median reached (adaptive repeats)
    )
    stopped_by: str | None = (
        None  # what ended adaptive repeats: "precision" (reached), "time cap", "repeat cap"
    )
    process_medians: tuple[
        float, ...
    ] = ()  # one median per fresh timing process; the figure is the fastest's
    device_name: str = ""  # the GPU's or the CPU's model (empty in timings recorded before it)

    @property
    def repeats(self) -> int:
        return len(self.seconds)

    @property
    def iqr_seconds(self) -> float:
        return self.q3_seconds - self.q1_seconds

    @classmethod
    def from_runs(
        cls,
        seconds: Sequence[float],
        *,
        sentences: int,
        output_tokens: int,
        batches: int,
        beam_size: int,
        warmup: int,
        device: str,
        threads: int,
    ) -> DecodeTiming:
        runs = tuple(float(s) for s in seconds)
        spread = run_spread(runs)
        median = spread.pop("median")
        return cls(
            decode_seconds=median,
            **spread,
            seconds=runs,
            per_sentence_seconds=median / sentences,
            sentences=sentences,
            output_tokens=output_tokens,
            batches=batches,
            beam_size=beam_size,
            warmup=warmup,
            device=device,
            threads=threads,
            torch_version=_torch_version(),
            device_name=device_name(device),
        )

    def to_dict(self) -> dict[str, Any]:
        """The timing as timing.json holds it."""
        return _json_fields(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecodeTiming:
        fields = {("decode_seconds" if k == OLD_FIGURE_KEY else k): v for k, v in data.items()}
        return _from_json_fields(cls, fields)


@dataclass(frozen=True)
class TrainTiming:
    """Seconds per training step over repeated timed passes of ``steps`` steps each."""

    step_seconds: float  # the figure: the median pass / steps
    min_seconds: float  # per step, fastest kept pass
    max_seconds: float
    q1_seconds: float
    q3_seconds: float
    seconds: tuple[float, ...]  # every kept pass, per step, in order
    tokens_per_second: float  # target tokens (what the loss is over) / second at the median
    tokens_per_step: float  # mean target tokens of the timed batches, padding excluded
    steps: int  # training steps (batches) in one timed pass
    batch_size: int  # sentences in the first timed batch (the study's batch size)
    warmup: int
    device: str
    threads: int
    torch_version: str
    cpus: tuple[int, ...] = ()
    interrupted: int = 0  # repeats on a shared core or a slow machine, thrown away and run again
    contended: bool = False  # too few clean repeats: the figure includes thrown-away ones
    passes_per_repeat: int = 1
    precision: float | None = None
    stopped_by: str | None = None
    process_medians: tuple[float, ...] = ()  # one figure per fresh process; the fastest's is kept

    @property
    def repeats(self) -> int:
        return len(self.seconds)

    @property
    def iqr_seconds(self) -> float:
        return self.q3_seconds - self.q1_seconds

    def to_dict(self) -> dict[str, Any]:
        return _json_fields(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainTiming:
        return _from_json_fields(cls, data)


#: the tuple fields of a timing, lists in timing.json
_TUPLE_FIELDS = ("seconds", "cpus", "process_medians")


def fastest(timings: Sequence[TrainTiming]) -> TrainTiming:
    """The fastest process's timing, with every process's figure in ``process_medians``."""
    best = min(timings, key=lambda t: t.step_seconds)
    return dataclasses.replace(best, process_medians=tuple(t.step_seconds for t in timings))


@dataclass(frozen=True)
class ModelCost:
    """What one process measured of one model (None: not asked for)."""

    decode: DecodeTiming | None = None
    train: TrainTiming | None = None
    memory: MemoryPeaks | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "timing": self.decode.to_dict() if self.decode else None,
            "train": self.train.to_dict() if self.train else None,
            "memory": self.memory.to_dict() if self.memory else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelCost:
        return cls(
            decode=DecodeTiming.from_dict(data["timing"]) if data.get("timing") else None,
            train=TrainTiming.from_dict(data["train"]) if data.get("train") else None,
            memory=MemoryPeaks.from_dict(data["memory"]) if data.get("memory") else None,
        )


def _json_fields(t: DecodeTiming | TrainTiming) -> dict[str, Any]:
    """A timing's fields as timing.json holds them, with its repeats and interquartile range."""
    return {
        **asdict(t),
        **{k: list(getattr(t, k)) for k in _TUPLE_FIELDS},
        "repeats": t.repeats,
        "iqr_seconds": t.iqr_seconds,
    }


def _from_json_fields(cls: type, data: Mapping[str, Any]) -> Any:
    """A timing of ``cls`` from timing.json's fields (unknown keys, and the derived ones, left out)."""
    return cls(
        **{
            k: (tuple(v) if k in _TUPLE_FIELDS else v)
            for k, v in data.items()
            if k in cls.__dataclass_fields__
        }
    )


def repeats_note(t: DecodeTiming) -> str:
    """``21 repeats of 8 passes, +-0.9%, fastest of 3 processes``: how a timing's median was taken."""
    passes = f" of {t.passes_per_repeat} passes" if t.passes_per_repeat > 1 else ""
    cap = f", stopped by the {t.stopped_by}" if t.stopped_by and t.stopped_by != "precision" else ""
    reached = f", median +-{100 * t.precision:.1f}% (95%){cap}" if t.precision is not None else ""
    processes = (
        (
            f", fastest of {len(t.process_medians)} processes "
            f"({'/'.join(f'{m:.4f}' for m in t.process_medians)})"
        )
        if len(t.process_medians) > 1
        else ""
    )
    return f"{t.repeats} repeats{passes}{reached}{processes}"


def shared_core_note(t: DecodeTiming) -> str:
    """What the log says about passes thrown away and run again ("" when none were)."""
    if t.contended:
        return (
            f"; WARNING: {t.interrupted} passes found the core shared with other work or the machine running "
            f"slow, too many to run again, so the median includes some of them: time it again on a quiet machine"
        )
    return (
        f"; {t.interrupted} pass(es) on a shared core or a slow machine run again"
        if t.interrupted
        else ""
    )


def train_note(t: TrainTiming) -> str:
    """``train step 0.0123 s (median of ...; 4 steps of batch 64), 5120 tokens/s``."""
    reached = f", +-{100 * t.precision:.1f}%" if t.precision is not None else ""
    processes = (
        f", fastest of {len(t.process_medians)} processes" if len(t.process_medians) > 1 else ""
    )
    flag = (
        "; WARNING: the train step's time is contended (the core was shared or the machine slow "
        "too often)"
        if t.contended
        else ""
    )
    return (
        f"train step {t.step_seconds:.4f} s (median of {t.repeats} repeats{reached}{processes}; "
        f"{t.steps} steps of batch {t.batch_size}), {t.tokens_per_second:.0f} tokens/s{flag}"
    )


@dataclass(frozen=True)
class TimingRecord:
    """What ``timing.json`` holds: the timings and where and on what they were taken. ``timing`` is
    decode time; ``train`` the training step (:mod:`sweeps.timing.train`), ``memory`` the peaks
    (:mod:`sweeps.timing.memory`); each None when the study's ``timing.measure`` leaves it out
    (``measured`` says what was asked for)."""

    trial_id: str
    checkpoint: str
    fingerprint: str
    split: str
    timing: DecodeTiming | None
    node_id: str
    hostname: str
    reserved_cpus: float
    reserved_gpus: float
    started_at: float  # unix time the job started (model loading included)
    finished_at: float
    train: TrainTiming | None = None
    memory: MemoryPeaks | None = None
    measured: tuple[str, ...] = ("decode",)  # files written before training cost: decode only
    #: the ``timing`` settings it was measured under (:func:`sweeps.timing.jobs.measure_settings`);
    #: None in files written before they were kept
    settings: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "timing": self.timing.to_dict() if self.timing else None,
            "train": self.train.to_dict() if self.train else None,
            "memory": self.memory.to_dict() if self.memory else None,
            "measured": list(self.measured),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingRecord:
        names = cls.__dataclass_fields__
        kw = {k: v for k, v in data.items() if k in names}
        parts = (("timing", DecodeTiming), ("train", TrainTiming), ("memory", MemoryPeaks))
        for key, kind in parts:
            kw[key] = kind.from_dict(data[key]) if data.get(key) else None
        kw["measured"] = tuple(data.get("measured") or ("decode",))
        return cls(**kw)


def read_record(path: str | Path) -> TimingRecord | None:
    """A ``timing.json`` (or the one in a folder), or None when missing or unreadable."""
    p = Path(path)
    p = p / TIMING_FILE if p.is_dir() else p
    try:
        return TimingRecord.from_dict(json.loads(p.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_json_atomic(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write JSON so that a reader sees the old file or the whole new one, never half of it."""
    return write_atomic(path, json.dumps(data, indent=2))


def _torch_version() -> str:
    """torch's version, where a timing is measured (torch is loaded there); this module is read by
    processes that never load it: the launcher, the timing stage's Ray task."""
    import torch

    return torch.__version__


# ---------------------------------------------------------------- in the results row


def attach_timing(
    row: dict[str, Any],
    timing: dict[str, Any] | None,
    error: str | None = None,
    split: str | None = None,
) -> None:
    """Write one trial's isolated decode timing (a ``DecodeTiming.to_dict()``, of the data
    ``split`` it decoded) into its row, or the timing stage's error into ``timing_error``."""
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
            timing_threads=timing.get("threads"),
        )
        if split is not None:
            row["timing_split"] = split
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
