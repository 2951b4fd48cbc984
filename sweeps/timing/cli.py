"""The timing command: a trained checkpoint's decode time, measured alone.

Run it (from the repository root):

    python -m sweeps.timing CKPT                              # the checkpoint's own data, validation split
    python -m sweeps.timing CKPT --split test --beam 10 --repeats 5 --threads 1
    python -m sweeps.timing CKPT --device cuda --json timing.json
    python -m sweeps.timing CKPT --measure decode train memory   # + the training step, peak memory
    # Britz et al.'s Table 3: WMT'17 en-de newstest2015 (2,169 sentences), beam 10
    python -m sweeps.timing CKPT --split valid --beam 10
    # a checkpoint saved without its datamodule's settings: name the data
    python -m sweeps.timing CKPT --task wmt17 --data-dir data/wmt17/en-de --data vocab_size=16000

``CKPT`` is a Lightning checkpoint, a folder holding one ``.ckpt`` (a sweep trial's checkpoint), or
a trial's folder (its last checkpoint, the one results.csv names).
The data come from the checkpoint where it stores its datamodule's settings (a fit with
``datamodule=dm``, either task: :mod:`sweeps.timing.checkpoint`); else name them: ``--task``,
``--data-dir``, ``--cache-dir`` and ``--data KEY=VALUE`` for any other setting the model was
trained with (they also override what a checkpoint stores).

What is timed and how is :mod:`sweeps.timing.measure`: one untimed warm-up pass (``--warmup``),
then at least ``--repeats`` timed passes, more until the median is known to ``--precision``; the
median is the figure. On CPU torch uses a fixed number of threads (``--threads``, default 1, as
``benchmarks/decode_speed.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datamodules import TASKS
from sweeps.assignments import AssignmentError, parse_assignments, yaml_value
from sweeps.layout import nonnegative_int, output_file, positive_int
from sweeps.timing.checkpoint import (
    check_split,
    data_task,
    read_settings,
)
from sweeps.timing.cost import MEASURES, measure_checkpoint
from sweeps.timing.files import command_checkpoint
from sweeps.timing.measure import TimingError
from sweeps.timing.memory import MEMORY_ENV, MemoryPeaks
from sweeps.timing.record import (
    DecodeTiming,
    repeats_note,
    shared_core_note,
    train_note,
    write_json_atomic,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sweeps.timing",
        description="Time decoding a whole split with a checkpoint: alone, data loading excluded, "
        "median of repeated runs after a warm-up.",
    )
    p.add_argument(
        "checkpoint",
        help="a Lightning .ckpt file, a trial's checkpoint folder, or a trial's folder (its last checkpoint)",
    )
    p.add_argument("--split", default="valid", help="valid (default) or test")
    p.add_argument(
        "--beam",
        type=positive_int,
        default=None,
        help="beam size; 1 = greedy (default: the checkpoint's val_beam_size)",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=5,
        help="timed repeats over the split, at least (default 5)",
    )
    p.add_argument(
        "--precision",
        type=_at_least(0.0),
        default=0.02,
        help="repeat until the median's notch (about a 95%% interval) is within this fraction of it (default 0.02); "
        "0: exactly --repeats passes",
    )
    p.add_argument(
        "--max-seconds",
        type=_at_least(0.0, strictly=True),
        default=30.0,
        help="with --precision: stop adding repeats this many wall seconds after the first timed "
        "pass (waits for a slow machine included), once --repeats clean ones are in; also caps "
        "--measure train (default 30)",
    )
    p.add_argument(
        "--calibration-seconds",
        type=_at_least(0.0, strictly=True),
        default=2.0,
        help="how long to probe the machine's speed before the passes, the bar slow passes are "
        "judged against; on the CPU with --threads 1 only (default 2)",
    )
    p.add_argument(
        "--warmup",
        type=nonnegative_int,
        default=1,
        help="untimed passes first (default 1; at least 1 while --precision is above 0)",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument(
        "--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)"
    )
    p.add_argument(
        "--task",
        default=None,
        choices=tuple(TASKS),
        help="the data's task; needed only when the checkpoint stores no datamodule settings",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="where the data files are now (WMT), if not where the checkpoint says",
    )
    p.add_argument("--cache-dir", default=None, help="the BPE/token cache folder (WMT)")
    p.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting of the checkpoint's datamodule (repeatable), e.g. --data batch_size=64 "
        "(the copy task's and WMT's) or --data eval_batch_size=64 (WMT's alone)",
    )
    p.add_argument(
        "--measure",
        nargs="+",
        default=["decode"],
        choices=MEASURES,
        metavar="WHAT",
        help="decode (default), train (seconds per training step on a copy of the model), "
        "memory (peaks of a training step and of decoding)",
    )
    p.add_argument(
        "--train-steps",
        type=positive_int,
        default=4,
        help="training batches in one timed pass (default 4)",
    )
    p.add_argument(
        "--json",
        type=output_file,
        default=None,
        metavar="FILE",
        help="also write the result as JSON",
    )
    return p.parse_args(argv)


def _at_least(low: float, strictly: bool = False):
    """An argparse ``type``: a number not below ``low`` (above it, ``strictly``)."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value < low or (strictly and value == low) or value != value:
            bound = "above" if strictly else "at least"
            raise argparse.ArgumentTypeError(f"must be {bound} {low:g}, got {text}")
        return value

    return number


def _data_overrides(args: argparse.Namespace) -> dict[str, Any]:
    try:  # KEY= : the empty string
        out = parse_assignments(args.data, value=lambda text: yaml_value(text) if text else "")
    except AssignmentError as exc:
        if exc.value is None or not exc.key:
            raise TimingError(
                f"--data {exc.item!r}: expected KEY=VALUE, e.g. --data batch_size=64"
            ) from None
        raise TimingError(f"--data {exc.item!r}: cannot parse the value {exc.value!r}") from None
    if args.data_dir is not None:
        out["data_dir"] = str(Path(args.data_dir).resolve())
    if args.cache_dir is not None:
        out["cache_dir"] = str(Path(args.cache_dir).resolve())
    return out


def data_seed(task: Mapping[str, Any]) -> int:
    """The data's seed, which also seeds the timed model's copy: a whole number from 0."""
    seed = task.get("seed") or 0
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TimingError(
            f"--data seed={seed}: the data's seed must be a whole number from 0, e.g. --data seed=1"
        )
    return seed


def describe(task: Mapping[str, Any]) -> str:
    if task["name"] == "wmt17":
        return f"wmt17 {task.get('pair', 'en-de')} ({task.get('data_dir')})"
    settings = ", ".join(
        f"{k}={task[k]}" for k in ("max_length", "val_size", "test_size", "seed") if k in task
    )
    return f"{task['name']} ({settings})"


def report_lines(timing: DecodeTiming, split: str) -> list[str]:
    """The command's summary of one timing."""
    t = timing
    return [
        f"split        {split}: {t.sentences} sentences in {t.batches} batches (moved to {t.device} before timing), "
        f"{t.output_tokens} tokens decoded",
        f"settings     beam {t.beam_size}{' (greedy)' if t.beam_size == 1 else ''}, device {t.device}"
        f"{f' ({t.device_name})' if t.device_name else ''}, "
        f"{t.threads} thread(s), torch {t.torch_version}; {t.warmup} warm-up + {t.repeats} timed runs",
        f"whole split  {t.decode_seconds:.4f} s  (median of {repeats_note(t)}; min {t.min_seconds:.4f}, "
        f"max {t.max_seconds:.4f}, IQR {t.iqr_seconds:.4f}{shared_core_note(t)})",
        f"per sentence {1000 * t.per_sentence_seconds:.3f} ms",
        "runs (s)     " + " ".join(f"{s:.4f}" for s in t.seconds),
    ]


def memory_needs_a_fresh_process(device: str) -> bool:
    """On CPU the peaks are read the way the timing stage reads them: in a process of their own
    with glibc's mmap threshold fixed (:data:`~sweeps.timing.memory.MEMORY_ENV` says why). Measured
    after decoding and training in one process with glibc's default, the same model's decode peak
    read 12.0 and 14.5 MiB in two runs (4.9-5.0 MiB afresh, twice)."""
    if not str(device).startswith("cpu"):
        return False
    return any(os.environ.get(k) != v for k, v in MEMORY_ENV.items())


def measure_memory_afresh(argv: Sequence[str]) -> MemoryPeaks:
    """The same command, ``--measure memory`` only, in a fresh process with :data:`MEMORY_ENV`."""
    rest, skip = [], False
    for item in argv:  # drop --measure's values and --json: the child writes a file of its own
        if skip and not item.startswith("-"):
            continue
        skip = item in ("--measure", "--json")
        if not skip and not item.startswith(("--measure=", "--json=")):
            rest.append(item)
    with tempfile.TemporaryDirectory(prefix="memory-") as tmp:
        out = Path(tmp) / "memory.json"
        cmd = [sys.executable, "-m", "sweeps.timing", *rest, "--measure", "memory"]
        proc = subprocess.run(
            [*cmd, "--json", str(out)],
            env={**os.environ, **MEMORY_ENV},
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not out.exists():
            why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise TimingError(f"the memory process failed: {why}")
        return MemoryPeaks.from_dict(json.loads(out.read_text())["memory"])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_split(args.split)
        overrides = _data_overrides(args)
        ckpt = command_checkpoint(args.checkpoint)
        hparams, saved = read_settings(ckpt)
        task = data_task(saved, args.task, overrides)
        print(
            f"checkpoint   {ckpt} (attention {hparams.get('attention')}; data {describe(task)})",
            flush=True,
        )
        measure, fresh_memory = list(args.measure), None
        if "memory" in measure and memory_needs_a_fresh_process(args.device):
            measure.remove("memory")
            fresh_memory = measure_memory_afresh(argv if argv is not None else sys.argv[1:])
        cost = measure_checkpoint(
            ckpt,
            task,
            data_seed(task),
            args.split,
            measure=measure,
            train_steps=args.train_steps,
            device=args.device,
            beam_size=args.beam,
            repeats=args.repeats,
            warmup=args.warmup,
            threads=args.threads,
            precision=args.precision or None,
            max_seconds=args.max_seconds,
            calibration_seconds=args.calibration_seconds,
        )
    except TimingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, TypeError) as exc:  # the datamodule's own checks
        lines = str(exc).strip().splitlines()
        print(
            f"error: {lines[0] if lines else type(exc).__name__} (see --help for the data options)",
            file=sys.stderr,
        )
        return 2
    if fresh_memory is not None:
        cost = dataclasses.replace(cost, memory=fresh_memory)
    timing = cost.decode
    if timing is not None:
        print("\n".join(report_lines(timing, args.split)))
    if cost.train is not None:
        print(f"training     {train_note(cost.train)}")
    if cost.memory is not None:
        m = cost.memory
        print(f"peak memory  train {m.train_peak_mb} MiB, decode {m.decode_peak_mb} MiB ({m.how})")
    if args.json:
        extra = cost.to_dict()
        write_json_atomic(
            args.json,
            {
                "checkpoint": str(ckpt),
                "split": args.split,
                "task": task,
                **(extra.pop("timing") or {}),
                **extra,
            },
        )
        print(f"wrote {args.json}")
    return 0
