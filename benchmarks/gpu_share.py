"""Trials sharing one GPU: P processes side by side, each training one trial's model, as Ray's
fractional GPUs (``resources.gpu: 1/P``) place them; trained steps per GPU-second, with eager or
graphed steps (``trainer.cuda_graphs``), under MPS or not.

Run it (from the repository root, on a machine with a GPU):

    python benchmarks/gpu_share.py                                          # time-sliced
    python -m sweeps.driver.mps run --want required --dir /tmp/mps -- python benchmarks/gpu_share.py
    python benchmarks/gpu_share.py --presets paper_copy --processes 1 4 --modes eager
    python benchmarks/gpu_share.py --quick                                  # seconds, CPU: plumbing
    python benchmarks/gpu_share.py --quick --device cuda                    # seconds, on the GPU

The second line runs the same under an MPS daemon of its own (every process a client of it).
Prints ONE JSON line on stdout (progress on stderr): ``mps`` (whether the processes ran under an
MPS daemon: ``CUDA_MPS_PIPE_DIRECTORY`` set), ``rows`` per preset, step mode and P:
``steps_per_gpu_second`` (trained steps of all P processes per second of the GPU's time),
``step_seconds`` (the median process's seconds per step), ``over_one_eager`` (steps per
GPU-second over one eager process alone on the GPU, the same preset: the yardstick of docs/gpu.md's gains);
``speedup`` maps ``<preset>/<mode>/P<P>`` to ``over_one_eager``; plus ``machine``, ``cuda``,
``settings``.

What is timed: one model per process (memory attention K=16, copy task at L = ``--length``, the
sweep files' batch size, learning rate and clipping per preset, as benchmarks/cuda_graphs.py),
each process pinned to a core of its own and built once (graphs captured before any timing). A
round sends "go" to P processes at once; each runs ``--steps`` steps and synchronises; the round
lasts until the last one is done. ``--rounds`` rounds per (preset, mode, P), every P of a preset
in turn, medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _args import positive_int, preset_name, quick_settings, refusal  # noqa: E402

PRESETS = ["tiny", "paper_copy"]
PROCESSES = [1, 2, 4, 8]
MODES = ["eager", "graphed"]
STEPS = {"tiny": 20, "paper_copy": 8, "paper_wmt": 4}
QUICK = dict(presets=["tiny"], processes=[1, 2], modes=["eager", "graphed"], length=6, batch=8,
             steps=2, rounds=1)  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", type=preset_name, default=PRESETS)
    p.add_argument(
        "--processes", nargs="+", type=positive_int, default=PROCESSES, help="P side by side"
    )
    p.add_argument("--modes", nargs="+", choices=MODES, default=MODES)
    p.add_argument(
        "--length", type=positive_int, default=40, help="copy-task max length L (default 40)"
    )
    p.add_argument(
        "--batch", type=positive_int, default=None, help="sentences per batch (the sweep's)"
    )
    p.add_argument("--steps", type=positive_int, default=None, help="steps per process and round")
    p.add_argument("--rounds", type=positive_int, default=3, help="timed rounds (default 3)")
    p.add_argument(
        "--device",
        default=None,
        help="cuda[:N] (default; cpu with --quick) or cpu (plumbing only)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="seconds, on the CPU unless --device is given: " + str(QUICK) + " where not given",
    )
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        quick_settings(p, args, QUICK, argv)
    # --quick alone: plumbing on the CPU, on any machine; not a word of the device: the GPU default
    args.device_default = args.device is None and not args.quick
    if args.device is None:
        args.device = "cpu" if args.quick else "cuda"
    return args


# ---------------------------------------------------------------- worker process side
def worker(core: int) -> None:
    """Serve JSON commands on stdin: ``build`` (a preset's eager and graphed step), ``run``
    (steps of one of them, timed and synchronised), ``drop``; one JSON reply per line."""
    import warnings

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from cuda_graphs import TRAINING, batches, build, eager_runner, graphed_runner

    warnings.filterwarnings("ignore")  # self.log without a Trainer
    torch.set_num_threads(1)
    if core >= 0 and core in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {core})
    runners: dict[str, Any] = {}
    for line in sys.stdin:
        task = json.loads(line)
        reply: dict[str, Any] = {}
        device = torch.device(task.get("device", "cpu"))
        if task["cmd"] == "build":
            batch, lr, clip = TRAINING[task["preset"]]
            pool, dm = batches(task["length"], task["batch"] or batch, task["seed"], device)
            module = build(task["preset"], lr, dm, task["seed"], device)
            runners["eager"] = eager_runner(module, pool, clip, task["steps"])
            module = build(task["preset"], lr, dm, task["seed"], device)
            capture = device.type == "cuda"
            runners["graphed"], graphed = graphed_runner(module, pool, clip, task["steps"], capture)
            runners["eager"]()  # the first-call costs, off the record
            runners["graphed"]()
            reply["graphs"] = graphed.graphs
        elif task["cmd"] == "run":
            sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
            sync()
            start = time.perf_counter()
            runners[task["mode"]]()
            sync()
            reply["seconds"] = time.perf_counter() - start
        elif task["cmd"] == "drop":
            runners.clear()
        print(json.dumps(reply), flush=True)


# ---------------------------------------------------------------- coordinator side
class Workers:
    def __init__(self, count: int) -> None:
        cores = sorted(os.sched_getaffinity(0), reverse=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(cores[i % len(cores)])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env,
            )  # fmt: skip
            for i in range(count)
        ]

    def ask(self, count: int, task: dict[str, Any]) -> list[dict[str, Any]]:
        """Send ``task`` to the first ``count`` workers at once, then read their replies."""
        for proc in self.procs[:count]:
            proc.stdin.write(json.dumps(task) + "\n")
            proc.stdin.flush()
        replies = []
        for i, proc in enumerate(self.procs[:count]):
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {i} died (its error is above)")
            replies.append(json.loads(line))
        return replies

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=60)


def measure_preset(workers: Workers, args: argparse.Namespace, preset: str) -> list[dict]:
    steps = args.steps or STEPS[preset]
    most = max(args.processes)
    built = workers.ask(most, dict(cmd="build", preset=preset, length=args.length, batch=args.batch,
                                   steps=steps, seed=0, device=args.device))  # fmt: skip
    rates: dict[tuple[str, int], list[float]] = {}
    per_step: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for mode in args.modes:
            for count in args.processes:
                start = time.perf_counter()
                replies = workers.ask(count, dict(cmd="run", mode=mode, device=args.device))
                wall = time.perf_counter() - start
                rates.setdefault((mode, count), []).append(count * steps / wall)
                per_step.setdefault((mode, count), []).append(
                    statistics.median(r["seconds"] for r in replies) / steps
                )
    workers.ask(most, {"cmd": "drop", "device": args.device})
    base = statistics.median(rates.get(("eager", 1), [float("nan")]))
    rows = []
    for (mode, count), values in rates.items():
        rate = statistics.median(values)
        rows.append(
            {
                "cell": f"{preset}/{mode}/P{count}",
                "preset": preset,
                "mode": mode,
                "processes": count,
                "steps_per_gpu_second": round(rate, 2),
                "step_seconds": round(statistics.median(per_step[(mode, count)]), 6),
                "over_one_eager": round(rate / base, 3),
                "round_rates": [round(v, 2) for v in values],
                "graphs_per_process": built[0].get("graphs"),
            }
        )
        print(
            f"{rows[-1]['cell']}: {rows[-1]['over_one_eager']}x one eager",
            file=sys.stderr,
            flush=True,
        )
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.worker is not None:
        worker(args.worker)
        return {}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    # cuda_graphs (torch and Lightning) only in the workers, which build the models
    from _machine import cuda_versions, machine_info, machine_line

    from sweeps.timing.devices import resolve_device

    if vars(args).pop("device_default") and not torch.cuda.is_available():
        raise refusal(
            "--device: this benchmark shares a GPU, on cuda by default, but torch sees no CUDA "
            "device; on a machine without a GPU give --device cpu (plumbing only) or --quick "
            "(seconds, on the CPU)"
        )
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise refusal(f"--device: {exc}") from None
    machine = machine_info(device)
    print(machine_line(machine), file=sys.stderr, flush=True)
    workers = Workers(max(args.processes))
    try:
        rows = [row for preset in args.presets for row in measure_preset(workers, args, preset)]
    finally:
        workers.close()
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    result = {
        "benchmark": "gpu_share",
        "mps": bool(pipe),
        "mps_pipe": pipe,
        "speedup": {row["cell"]: row["over_one_eager"] for row in rows},
        "unit": "trained steps per GPU-second over one eager process alone on the GPU",
        "machine": {**machine, "line": machine_line(machine)},
        "cuda": cuda_versions(),
        "device": str(device),
        "settings": {
            k: getattr(args, k)
            for k in ("presets", "processes", "modes", "length", "batch", "steps", "rounds")
        },  # fmt: skip
        "rows": rows,
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
