"""Training speed and memory per attention mechanism and source length: the cost Britz et al.
leave open ("further exploration of their effect on memory and training speed"), measured side
by side in one process.

Run it (from the repository root):

    .venv/bin/python benchmarks/train_speed.py --quick                   # seconds: the tiny preset
    .venv/bin/python benchmarks/train_speed.py                           # paper_copy, L=50 and 200
    .venv/bin/python benchmarks/train_speed.py --device cuda --batch 128 # the paper's batch, on a GPU
    .venv/bin/python benchmarks/train_speed.py --mechanisms none memory:K=4 memory:K=32 bahdanau \\
        --lengths 10 50 100 200

Prints ONE JSON line on stdout (the machine and settings lines go to stderr): ``machine`` (CPU, cores, torch, device), ``load`` (the 1-minute
load average before and after: figures taken under load say so), ``settings``, ``rows`` (per
mechanism and length: ``step_seconds`` = the median over the repeats, ``min_seconds``,
``tokens_per_second``, ``peak_mb``) and ``ratios`` (per length, memory / none and Bahdanau /
memory for every memory spec: ``step`` and ``peak``).

What is measured is what the timing stage measures of a trained model (:mod:`sweeps.timing.train`,
:mod:`sweeps.timing.memory`): one training step -- ``Seq2SeqModule.training_step`` (forward, the
loss), backward and Adam's step -- on one batch of ``--batch`` copy-task sentences of exactly L
symbols, already on the device. Timing: one untimed warm-up round, then ``--repeats`` rounds, each
running one step of every (mechanism, length) in turn (a slow spell of the machine falls on all
alike, so the ratios hold still). Peak memory: the memory one step adds above what the process
held before it (a fresh copy of the model with a fresh optimiser, so the optimiser's state is
counted): on CPU the resident peak (``VmHWM`` after a reset, above ``VmRSS``), on a GPU the
allocator's peak; the median over ``--memory-repeats`` interleaved rounds. On CPU the process is
pinned to ``--threads`` cores. Models have random weights (a step costs the same trained or not).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import (  # noqa: E402
    mechanism_spec,
    nonnegative_int,
    positive_int,
    preset_name,
    quick_settings,
    refuse_unbuildable,
)
from _machine import announced, machine_info, time_interleaved  # noqa: E402
from decode_speed import make_batch, parse_mechanism  # noqa: E402

from datamodules.vocab import FIRST_SYMBOL  # noqa: E402
from lightning_modules.module import Seq2SeqModule  # noqa: E402
from sweeps.timing.memory import peak_above  # noqa: E402
from sweeps.timing.train import quiet_logging, step_runner, trainer_copy  # noqa: E402

MECHANISMS = ["none", "memory:K=32", "bahdanau"]
LENGTHS = [50, 200]
QUICK = dict(lengths=[4, 8], preset="tiny", batch=4, repeats=3, memory_repeats=1)
VOCAB = 20 + FIRST_SYMBOL


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--mechanisms",
        nargs="+",
        type=mechanism_spec,
        default=MECHANISMS,
        help="name[:key=value,...]",
    )
    p.add_argument("--lengths", nargs="+", type=positive_int, default=LENGTHS)
    p.add_argument(
        "--preset",
        type=preset_name,
        default="paper_copy",
        help="model sizes (default paper_copy)",
    )
    p.add_argument("--batch", type=positive_int, default=32, help="sentences per step (default 32)")
    p.add_argument("--repeats", type=positive_int, default=7, help="timed rounds (default 7)")
    p.add_argument(
        "--warmup", type=nonnegative_int, default=1, help="untimed rounds first (default 1)"
    )
    p.add_argument("--memory-repeats", type=positive_int, default=3, help="peak rounds (default 3)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads on CPU (default 1)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick", action="store_true", help="a few seconds: " + str(QUICK) + " where not given"
    )
    args = p.parse_args(argv)
    if args.quick:
        quick_settings(p, args, QUICK, argv)
    refuse_unbuildable(
        p,
        args.mechanisms,
        lambda spec: build(spec, max(args.lengths), args.preset, torch.device("cpu"), 0),
    )
    return args


def build(spec: str, length: int, preset: str, device: torch.device, seed: int) -> Seq2SeqModule:
    name, options = parse_mechanism(spec)
    torch.manual_seed(seed)
    return Seq2SeqModule(
        VOCAB,
        VOCAB,
        attention=name,
        attention_kwargs=options,
        preset=preset,
        max_source_len=length + 1,
        val_decode=False,
    ).to(device)


def measure(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """Step time and peak memory of every (mechanism, length), interleaved; the JSON's rows."""
    steps, peaks, tokens = {}, {}, {}
    batches, models = {}, {}
    for length in args.lengths:
        src, src_lengths = make_batch(args.batch, length, device, args.seed)
        batches[length] = {"src": src, "src_lengths": src_lengths, "tgt": src.clone()}
        for spec in args.mechanisms:
            models[spec, length] = build(spec, length, args.preset, device, args.seed)
            tokens[spec, length] = int(src.numel())  # every target position is a real token
    with quiet_logging():
        runners = {
            key: step_runner(*trainer_copy(module, device), [batches[key[1]]])
            for key, module in models.items()
        }
        timed = time_interleaved(runners, device, args.warmup, args.repeats)
        del runners
        for _ in range(args.memory_repeats):
            for key, module in models.items():
                warm = step_runner(*trainer_copy(module, device), [batches[key[1]]])
                warm()  # one-time allocations of this shape, off the record
                del warm
                run = step_runner(*trainer_copy(module, device), [batches[key[1]]])
                peaks.setdefault(key, []).append(peak_above(run, device))
                del run
    rows = []
    for key, (median, times) in timed.items():
        spec, length = key
        steps[key] = median
        rows.append(
            {
                "mechanism": spec,
                "length": length,
                "step_seconds": round(median, 6),
                "min_seconds": round(min(times), 6),
                "tokens_per_second": round(tokens[key] / median, 1),
                "peak_mb": round(statistics.median(peaks[key]), 2),
                "peak_mb_samples": [round(v, 2) for v in peaks[key]],
                "batch": args.batch,
                "preset": args.preset,
            }
        )
    return rows


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per length: each memory spec / none and Bahdanau / each memory spec, of step time and peak."""
    by = {(r["mechanism"], r["length"]): r for r in rows}
    specs = list(dict.fromkeys(r["mechanism"] for r in rows))
    memories = [s for s in specs if s.startswith("memory")]
    out = []
    for length in dict.fromkeys(r["length"] for r in rows):
        for num, den in [(m, "none") for m in memories] + [("bahdanau", m) for m in memories]:
            a, b = by.get((num, length)), by.get((den, length))
            if a and b:
                out.append(
                    {
                        "length": length,
                        "ratio": f"{num}/{den}",
                        "step": round(a["step_seconds"] / b["step_seconds"], 3),
                        "peak": round(a["peak_mb"] / b["peak_mb"], 3) if b["peak_mb"] else None,
                    }
                )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    settings = (
        f"settings: mechanisms {' '.join(args.mechanisms)} | lengths {args.lengths} | preset "
        f"{args.preset} | batch {args.batch} | {args.repeats} rounds after {args.warmup} warm-up"
    )
    # the machine and settings lines go to stderr: stdout holds the JSON line alone
    with (
        contextlib.redirect_stdout(sys.stderr),
        announced(args.device, args.threads, settings) as header,
    ):
        device = torch.device(args.device)
        rows = measure(args, device)
        machine = machine_info(device)
    result = {
        "benchmark": "train_speed",
        "machine": {**machine, "line": header},
        "load": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "settings": {
            k: getattr(args, k)
            for k in ("mechanisms", "lengths", "preset", "batch", "repeats", "memory_repeats")
        },
        "rows": rows,
        "ratios": ratios(rows),
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
