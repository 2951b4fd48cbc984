"""Table 1 on a GPU, end to end, three ways: what the plan's arrangement gives against how a Ray
Tune user runs the same trials.

    python benchmarks/gpu_sweep.py --out OUT                 # on the GPU node, about ten minutes
    python benchmarks/gpu_sweep.py --out OUT --dry-run       # the three commands
    python benchmarks/gpu_sweep.py --out OUT --quick         # the plumbing, on any machine (CPU)

Each way is one launch of ``sweeps/launch.py sweeps/k_vs_length.yaml --profile gpu`` (Table 1 at
the paper's model size, sized by the plan for about one minute of training steps on one H100), with
W&B offline and without the held-out stage and, but for a brief decode timing in ``c`` that makes
its results.md name the device, without the timing stage (this compares training):

- ``a``: one eager trial per GPU, fusion off (``resources.gpu: 1``): how a Ray Tune user runs
  it. The whole profile does not fit the time: a fixed subset of its cells (``--a-lengths``,
  default the shortest length) runs, and its figures are per trial;
- ``b``: the best unfused arrangement measured: graphed, 8 to a GPU under MPS, one CPU each;
- ``c``: the plan's default (``resources.gpu: auto``).

For each way it prints one JSON line: the Tune run's wall seconds (the ledger's training stage)
times the GPUs, the member-steps trained (results.csv's ``step``, summed), member-steps per
GPU-second, and per cell the mean validation BLEU over seeds and their spread; then a last line
(``"way": "all"``) with the ratios c/a and c/b and, per cell, whether c's BLEU lies within the seed
spread of a (a's cells: those it ran). results.md of each way names the device.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _args import positive_int  # noqa: E402
from _children import run_child  # noqa: E402

SPEC = "sweeps/k_vs_length.yaml"
STAGES_OFF = ["timing.enabled=false", "heldout.enabled=false", "wandb.mode=offline"]
#: the three ways' overrides of the gpu profile
WAYS: dict[str, list[str]] = {
    "a": ["fusion=off", "resources.gpu=1", "resources.cpu=1", "resources.mps=off"],
    "b": [
        "fusion=off",
        "trainer.cuda_graphs=true",
        "resources.gpu=0.125",
        "resources.cpu=1",
        "resources.mps=on",
    ],
    # the plan's: its models timed decoding, briefly, so that results.md names the device
    "c": [
        "timing.enabled=true",
        "timing.measure=[decode]",
        "timing.processes=1",
        "timing.max_seconds=1",
    ],
}


def command(
    way: str, out: Path, quick: bool, a_lengths: list[int], extra: Sequence[str] = ()
) -> list[str]:
    """One way's launch; ``extra``: that way's own ``--set`` overrides, applied last."""
    overrides = [*STAGES_OFF, *WAYS[way]]  # (c's timing setting comes after, and wins)
    profile = "gpu"
    if way == "a" and a_lengths:
        overrides.append(f"grid.task.max_length={a_lengths}")
    if quick:  # the plumbing on a CPU: the smoke profile, no GPU asked, graphs off
        profile = "smoke"
        overrides = [
            o
            for o in overrides
            if not o.startswith(("resources.gpu", "resources.mps", "trainer.cuda"))
        ]
        overrides += [
            "grid.task.max_length=[5]",
            "trainer.max_steps=20",
            "trainer.val_check_interval=10",
        ]
    overrides += list(extra)
    cmd = [
        sys.executable,
        "sweeps/launch.py",
        SPEC,
        "--profile",
        profile,
        "--address",
        "local",  # a Ray of its own: each way alone on the machine
        "--output",
        str(out / way),
    ]
    return cmd + [a for o in overrides for a in ("--set", o)] + ["--verbose", "0"]


def gpus() -> int:
    try:
        import torch

        return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1
    except ImportError:
        return 1


def figures(way: str, folder: Path, seconds: float, rc: int) -> dict[str, Any]:
    """One way's figures from what its launch wrote."""
    import pandas as pd

    out: dict[str, Any] = {"way": way, "rc": rc, "wall_seconds": round(seconds, 1)}
    ledger = folder / "budget.json"
    csv = folder / "results.csv"
    if not ledger.is_file() or not csv.is_file():
        return {**out, "error": f"{folder} holds no results"}
    training = json.loads(ledger.read_text())["stages"].get("training", {})
    gpu_seconds = float(training.get("hours", 0.0)) * 3600 * gpus()
    df = pd.read_csv(csv)
    member_steps = int(df["step"].fillna(0).sum())
    cells = {}
    for cell, rows in df.groupby("cell"):
        bleu = rows["val/bleu"].dropna()
        cells[str(cell)] = {
            "bleu": round(float(bleu.mean()), 2) if len(bleu) else None,
            "seeds": [round(float(b), 2) for b in bleu],
        }
    md = (folder / "results.md").read_text() if (folder / "results.md").is_file() else ""
    return {
        **out,
        "trials": len(df),
        "done": int((df["status"] == "done").sum()),
        "gpu_seconds": round(gpu_seconds, 1),
        "member_steps": member_steps,
        "member_steps_per_gpu_second": round(member_steps / gpu_seconds, 2)
        if gpu_seconds
        else None,
        "cells": cells,
        "device_named": next(
            (ln for ln in md.splitlines() if "timing_device" in ln or "GPU" in ln), ""
        ),
    }


def compare(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """c against a and b, and c's BLEU per cell against a's seed spread."""
    rate = {w: r.get("member_steps_per_gpu_second") for w, r in results.items()}
    out: dict[str, Any] = {"way": "all"}
    for other in ("a", "b"):
        if rate.get("c") and rate.get(other):
            out[f"c_over_{other}"] = round(rate["c"] / rate[other], 2)
    within = {}
    for cell, a in (results.get("a") or {}).get("cells", {}).items():
        c = (results.get("c") or {}).get("cells", {}).get(cell)
        if c and c["bleu"] is not None and a["seeds"]:
            within[cell] = min(a["seeds"]) <= c["bleu"] <= max(a["seeds"])
    out["c_bleu_within_a_seed_spread"] = within
    return out


def launch_problem(cmd: Sequence[str]) -> str | None:
    """What the launcher would refuse in ``cmd`` (its sweep file, profile and ``--set``), said
    before any way runs: a misspelt ``--set`` found after way a has spent its GPU time wastes it."""
    sys.path.insert(0, str(ROOT))
    from sweeps.launch import parse_args
    from sweeps.spec import SpecError, load_spec

    args = parse_args(list(cmd[2:]))
    try:
        load_spec(str(ROOT / args.spec), overrides=args.overrides, profile=args.profile)
    except SpecError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ways", nargs="+", default=["a", "b", "c"], choices=sorted(WAYS))
    p.add_argument("--a-lengths", type=positive_int, nargs="*", default=[10])
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="WAY:KEY=VALUE",
        help="an override for one way's launch, after its own (repeatable), e.g. "
        "b:budget.hours=0.05 (a time cap: the launch stops its trials when it runs out) or "
        "c:timing.enabled=false",
    )
    p.add_argument("--quick", action="store_true", help="the plumbing on a CPU, in minutes")
    p.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    args = p.parse_args(argv)
    extra: dict[str, list[str]] = {way: [] for way in WAYS}
    for item in args.sets:
        way, _, override = item.partition(":")
        if way not in WAYS or "=" not in override:
            p.error(f"--set {item!r}: give WAY:KEY=VALUE, WAY one of {', '.join(WAYS)}")
        extra[way].append(override)
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out {args.out}: a file; give a folder (each way writes a folder in it)")
    for way in args.ways:  # each launch's sweep file, profile and --set read as it will read them
        if problem := launch_problem(
            command(way, args.out, args.quick, args.a_lengths, extra[way])
        ):
            p.error(f"way {way}: {problem}")
    results = {}
    # Ctrl-C (or a SIGINT to the process group) reaches the running launch too, which stops its
    # trials and writes its results; this process waits for that, prints the way's figures, and
    # starts no further way
    stopped: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: stopped.append(signum))
    for way in args.ways:
        cmd = command(way, args.out, args.quick, args.a_lengths, extra[way])
        if args.dry_run:
            print(" ".join(cmd))
            continue
        if stopped:
            print(json.dumps({"way": way, "skipped": "interrupted before it began"}), flush=True)
            continue
        env = {**os.environ, "WANDB_MODE": "offline", "RAY_USAGE_STATS_ENABLED": "0"}
        start = time.perf_counter()
        # SIGTERM and Ctrl-C passed on: a stopped benchmark stops its launch and the launch's Ray
        rc = run_child(cmd, cwd=ROOT, env=env).returncode
        result = figures(way, args.out / way / "k_vs_length", time.perf_counter() - start, rc)
        results[way] = result
        print(json.dumps(result), flush=True)
    if not args.dry_run:
        print(json.dumps(compare(results)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
