"""Fused trials against unfused ones: trained member-steps per core-second (per GPU-second with
``--device cuda``) of M same-shape models trained as one fused model
(:mod:`lightning_modules.fused`) over M separate trials.

Run it (from the repository root, on a quiet machine):

    .venv/bin/python benchmarks/fusion.py --quick             # seconds: proves it runs
    .venv/bin/python benchmarks/fusion.py                     # tiny and paper_copy, L 10 and 40, M 1 2 3 4 8
    .venv/bin/python benchmarks/fusion.py --preset tiny --lengths 10 --members 1 3
    .venv/bin/python benchmarks/fusion.py --device cuda --lengths 40 --members 1 2 4 8 16
    .venv/bin/python benchmarks/fusion.py --mixed --preset tiny --lengths 10   # the mixed-axes cell

Prints ONE JSON line on stdout (progress goes to stderr): ``speedup`` maps
``<preset>/L<L>/M<M>`` to fused member-steps per core-second over unfused trials' (e.g.
``"tiny/L10/M3": 1.4``), ``rows`` the raw figures per cell (``unfused_step_seconds``: one trial's
step; ``fused_step_seconds``: one step of the group of M; the member-steps per core-second of
both; every round's ratio), plus ``machine`` (benchmarks/_machine.py's line), ``torch``,
``device``, ``load`` (the 1-minute load average before and after: figures taken under load say
so) and ``settings``. Each row also has ``cpu_time_speedup``, the same ratio over the processes'
own CPU time (member-steps per CPU-second): on a quiet machine the two agree; on a shared one the
wall-clock figures take other processes' time slices and only the CPU-time ratio means anything
(it still feels their contention for caches and memory). With ``--device cuda`` it is the host's
CPU time per member-step, not the GPU's.

What is compared, as a sweep places its work:

- On CPU, every core busy in both arms, one single-threaded process pinned to each of the
  ``--cores`` cores (default: all this process may use), as a sweep with ``resources.cpu: 1``
  runs its trials or its fused groups side by side. Unfused: each process trains one model (one
  trial); fused: each process trains one group of M members. Member-steps per core-second =
  (members x steps / seconds, summed over the processes) / cores. Both arms share the cores'
  caches and memory bandwidth alike, so the ratio is what a sweep gains per core.
- On a GPU (``--device cuda``), as Ray's fractional GPUs place trials: unfused, M processes of
  one trial each side by side on the one GPU; fused, one process with the M members. Per
  GPU-second: member-steps summed over the processes / seconds.

One step is what a trial's training step does: the module's loss (``training_step``), backward,
gradient-norm clipping where the sweep clips, Adam; the fused step is
:meth:`FusedSeq2Seq.train_step`. Memory attention with K=16 (``--attention`` names another
mechanism, with its default options; ``settings.attention`` says which); copy-task batches as the datamodule
makes them (random lengths 0..L plus EOS, padded to the batch's longest), each member and trial
its own stream; batch size and learning rate as the sweep files set them (tiny: 64 and 3e-3 with
clipping at 1.0, as the quickstart and k_vs_length's cpu profile; paper_copy: 128 and 1e-4,
unclipped, as k_vs_length). Timing: one untimed warm-up run of every arm, then ``--repeats``
rounds, each running every arm of a (preset, L) in turn for ``--steps`` steps (a slow spell of the
machine falls on all alike); the figures are medians over the rounds.

The mixed-axes cell (``--mixed``, in place of the M cells): one fused group whose members' memory
attention differs in K (``--mixed-k``, default 1 4 16 32 64) and scoring pair
(``--mixed-scoring``, default softmax/softmax and sigmoid/sigmoid), ``--mixed-seeds`` members of
each shape (default 1: 10 members), padded to the largest K with each member's branch picked by a
mask (:mod:`lightning_modules.fused.memory`), against the same members in one fused group per
shape. On CPU each process trains the whole mixed group, or every shape's group in turn (one
round: each group one step), so both arms do the members' steps on the same cores; on a GPU the
mixed group is one process and the shape groups are one process each side by side, as a sweep
places them. Its rows (``rows``, and ``speedup`` under ``<preset>/L<L>/mixed<members>``) give
``mixed_step_seconds`` (one step of the mixed group), ``by_shape_round_seconds`` (one step of
every shape's group), the member-steps per unit-second of both, and ``speedup``: mixed over by
shape.
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
if str(ROOT) not in sys.path:  # run as a file on a machine without the install (a GPU node)
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import positive_int, preset_name, quick_settings, refusal  # noqa: E402

PRESETS = ["tiny", "paper_copy"]
LENGTHS = [10, 40]
MEMBERS = [1, 2, 3, 4, 8]
#: the sweep files' training settings per preset: batch, lr, gradient_clip_val
TRAINING = {"tiny": (64, 3e-3, 1.0), "paper_copy": (128, 1e-4, 0.0), "paper_wmt": (128, 1e-4, 0.0)}
STEPS = {"tiny": 8, "paper_copy": 2, "paper_wmt": 1}
QUICK = dict(presets=["tiny"], lengths=[6], members=[1, 2], batch=8, steps=2, repeats=1, cores=1)
POOL = 4  # batches per stream, cycled
MIXED_K = [1, 4, 16, 32, 64]
MIXED_SCORING = ["softmax/softmax", "sigmoid/sigmoid"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--preset",
        dest="presets",
        nargs="+",
        type=preset_name,
        default=PRESETS,
        help="model presets",
    )
    p.add_argument(
        "--lengths", nargs="+", type=positive_int, default=LENGTHS, help="copy-task max lengths"
    )
    p.add_argument(
        "--members", nargs="+", type=positive_int, default=MEMBERS, help="members M per group"
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument(
        "--attention",
        default="memory",
        help="the mechanism (default memory, with K=16); another name of the attention registry "
        "(bahdanau, none, luong_general, ...) with its default options",
    )
    p.add_argument(
        "--cores", type=positive_int, default=None, help="CPU: processes side by side (all)"
    )
    p.add_argument(
        "--batch", type=positive_int, default=None, help="sentences per batch (the sweep's)"
    )
    p.add_argument(
        "--steps", type=positive_int, default=None, help="steps per timed run (per preset)"
    )
    p.add_argument("--repeats", type=positive_int, default=5, help="timed rounds (default 5)")
    p.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed"])
    p.add_argument(
        "--graphs",
        action="store_true",
        help="also time each fused group's step captured as CUDA graphs "
        "(lightning_modules.fused.graphs; on a CPU the same work eagerly)",
    )
    p.add_argument(
        "--quick", action="store_true", help="a few seconds: " + str(QUICK) + " where not given"
    )
    p.add_argument(
        "--mixed",
        action="store_true",
        help="the mixed-axes cell (memory attention: one group over --mixed-k x --mixed-scoring "
        "against one group per shape) in place of the M cells",
    )
    p.add_argument(
        "--mixed-k", nargs="+", type=positive_int, default=MIXED_K, help="the members' K"
    )
    p.add_argument(
        "--mixed-scoring",
        nargs="+",
        default=MIXED_SCORING,
        help="the members' scoring pairs, encoder/decoder",
    )
    p.add_argument("--mixed-seeds", type=positive_int, default=1, help="members of each shape")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        quick_settings(p, args, QUICK, argv)
    if args.mixed:
        pairs = [pair.split("/") for pair in args.mixed_scoring]
        if any(len(pair) != 2 or not {*pair} <= {"softmax", "sigmoid"} for pair in pairs):
            p.error("--mixed-scoring takes encoder/decoder pairs of softmax and sigmoid")
        if args.attention != "memory":
            p.error("--mixed varies memory attention's options: leave --attention at memory")
        if args.graphs:
            p.error("--graphs times the M cells' fused groups: leave out --mixed")
    if args.graphs and args.precision != "32-true":
        p.error("--graphs captures float32 steps: leave --precision at 32-true")
    from lightning_modules.attention import ATTENTION_REGISTRY

    if args.attention not in ATTENTION_REGISTRY:
        p.error(f"--attention {args.attention!r}: one of {', '.join(sorted(ATTENTION_REGISTRY))}")
    return args


# ---------------------------------------------------------------- worker process side
def _member_options(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Each member's attention options: the mixed cell's ``shapes`` ([K, encoder, decoder] per
    member), else memory attention's K=16 (another mechanism: its defaults)."""
    if "shapes" in task:
        return [dict(K=k, encoder_scoring=e, decoder_scoring=d) for k, e, d in task["shapes"]]
    return [{"K": 16} if task["attention"] == "memory" else {}] * task["members"]


def _build(task: dict[str, Any]) -> Any:
    """A step function for one arm of one cell: one trial, one fused group of M members, or
    (``by_shape``) one fused group per shape of the members, each stepped in turn."""
    import torch

    from datamodules import CopyTaskDataModule
    from lightning_modules import Seq2SeqModule
    from lightning_modules.fused import FusedSeq2Seq

    device = torch.device(task["device"])
    options = _member_options(task)
    streams = []
    for member in range(len(options)):
        dm = CopyTaskDataModule(
            vocab_size=20,
            max_length=task["length"],
            train_size=task["batch"] * POOL,
            val_size=1,
            test_size=0,
            batch_size=task["batch"],
            seed=task["seed"] + member,
        )
        dm.setup("fit")
        loader = iter(dm.train_dataloader())
        streams.append([{k: v.to(device) for k, v in next(loader).items()} for _ in range(POOL)])
    modules = []
    for member, attention_kwargs in enumerate(options):
        torch.manual_seed(task["seed"] + member)
        modules.append(
            Seq2SeqModule(
                dm.src_vocab_size,
                dm.tgt_vocab_size,
                attention=task["attention"],
                attention_kwargs=attention_kwargs,
                preset=task["preset"],
                max_source_len=dm.max_source_len,
                lr=task["lr"],
                val_decode=False,
            ).to(device)
        )
    bf16 = task["precision"] == "bf16-mixed"
    clip = task["clip"] or None
    if task["fused"] and task.get("by_shape"):
        shapes: dict[str, list[int]] = {}
        for member, attention_kwargs in enumerate(options):
            shapes.setdefault(json.dumps(attention_kwargs, sort_keys=True), []).append(member)
        groups = []
        for js in shapes.values():
            group = [modules[j] for j in js]
            groups.append(
                (FusedSeq2Seq.from_modules(group, [clip] * len(js), task["precision"]), js)
            )
        return lambda i: [g.train_step([streams[j][i % POOL] for j in js]) for g, js in groups]
    if task["fused"]:
        fused = FusedSeq2Seq.from_modules(modules, [clip] * len(modules), task["precision"])
        if task.get("graphed"):
            from lightning_modules.fused.graphs import GraphedFusedSteps

            graphed = GraphedFusedSteps(fused)
            return lambda i: graphed.step([s[i % POOL] for s in streams])
        return lambda i: fused.train_step([s[i % POOL] for s in streams])
    module, batches = modules[0].train(), streams[0]
    optimizer = module.configure_optimizers()

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = module.training_step(batches[i % POOL], i)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()

    return step


def worker(core: int) -> None:
    """Serve JSON commands on stdin (``build``, ``run``, ``drop``), one JSON reply per line."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")  # self.log without a Trainer, the flat layout's note
    torch.set_num_threads(1)
    if core >= 0:
        os.sched_setaffinity(0, {core})
    steps: dict[str, Any] = {}
    for line in sys.stdin:
        task = json.loads(line)
        reply: dict[str, Any] = {}
        if task["cmd"] == "build":
            steps[task["key"]] = _build(task)
            # untimed steps: allocations and first-call costs; graphed, every batch of the pool
            # once, so that each of its length buckets is captured before the timing
            for i in range(POOL if task.get("graphed") else 1):
                steps[task["key"]](i)
        elif task["cmd"] == "run":
            step, sync = (
                steps[task["key"]],
                torch.cuda.synchronize if "cuda" in task["device"] else None,
            )
            if sync:
                sync()  # nothing queued before (the build's warm-up step) counts
                torch.cuda.reset_peak_memory_stats()
            start, start_cpu = time.perf_counter(), time.process_time()
            for i in range(task["steps"]):
                step(i)
            if sync:
                sync()
            reply["seconds"] = time.perf_counter() - start
            reply["cpu_seconds"] = time.process_time() - start_cpu
            if sync:  # this process's allocator peak over the timed steps (one model or group)
                reply["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        elif task["cmd"] == "drop":
            steps.pop(task["key"], None)
        print(json.dumps(reply), flush=True)


# ---------------------------------------------------------------- coordinator side
class Pool:
    """Worker processes, each pinned to its own core on CPU; commands go to several at once."""

    def __init__(self, cores: Sequence[int]) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(core)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env,
            )
            for core in cores
        ]

    def ask(self, indices: Sequence[int], task: dict[str, Any]) -> list[dict[str, Any]]:
        for i in indices:
            self.procs[i].stdin.write(json.dumps(task) + "\n")
            self.procs[i].stdin.flush()
        replies = []
        for i in indices:
            line = self.procs[i].stdout.readline()
            if not line:
                raise RuntimeError(f"benchmark worker {i} died (its error is above)")
            replies.append(json.loads(line))
        return replies

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=60)


def arms(
    device: str, members: Sequence[int], cores: int, graphs: bool = False
) -> list[dict[str, Any]]:
    """The arms of one (preset, L) cell: who runs what, and over how many units (cores or GPUs).
    ``graphs``: each fused arm also graphed (``fused_graphed/M<m>``)."""
    cuda = device.startswith("cuda")
    workers = 1 if cuda else cores
    out = (
        []
        if cuda
        else [{"name": "unfused", "fused": False, "members": 1, "workers": cores, "units": cores}]
    )
    for m in members:
        if cuda:
            out.append(
                {"name": f"unfused/M{m}", "fused": False, "members": 1, "workers": m, "units": 1}
            )
        fused = {"fused": True, "members": m, "workers": workers, "units": workers}
        out.append({"name": f"fused/M{m}", **fused})
        if graphs:
            out.append({"name": f"fused_graphed/M{m}", "graphed": True, **fused})
    return out


def measure_cell(
    pool: Pool, args: argparse.Namespace, preset: str, length: int
) -> list[dict[str, Any]]:
    """Every arm of one (preset, L), interleaved over the rounds; one row per M."""
    batch, lr, clip = TRAINING[preset]
    steps = args.steps or STEPS[preset]
    cell = dict(preset=preset, length=length, batch=args.batch or batch, lr=lr, clip=clip,
                device=args.device, precision=args.precision,
                attention=args.attention)  # fmt: skip
    plan = arms(args.device, args.members, len(pool.procs), args.graphs)
    for arm in plan:
        for w in range(arm["workers"]):
            key = f"{preset}/{length}/{arm['name']}"
            task = {**cell, "cmd": "build", "key": key, "fused": arm["fused"],
                    "graphed": arm.get("graphed", False), "members": arm["members"],
                    "seed": 1000 * w}  # fmt: skip
            pool.ask([w], task)
    rates: dict[str, list[float]] = {arm["name"]: [] for arm in plan}
    cpu_rates: dict[str, list[float]] = {arm["name"]: [] for arm in plan}
    seconds: dict[str, list[float]] = {arm["name"]: [] for arm in plan}
    peaks: dict[str, float] = {}
    for _ in range(args.repeats):
        for arm in plan:
            key = f"{preset}/{length}/{arm['name']}"
            replies = pool.ask(
                range(arm["workers"]),
                {"cmd": "run", "key": key, "steps": steps, "device": args.device},
            )
            per_step = [r["seconds"] / steps for r in replies]
            seconds[arm["name"]].append(statistics.median(per_step))
            if "peak_mib" in replies[0]:
                peaks[arm["name"]] = max(
                    peaks.get(arm["name"], 0.0), *(r["peak_mib"] for r in replies)
                )
            rates[arm["name"]].append(sum(arm["members"] / s for s in per_step) / arm["units"])
            cpu_rates[arm["name"]].append(
                sum(arm["members"] * steps / r["cpu_seconds"] for r in replies) / len(replies)
            )
    for arm in plan:
        pool.ask(range(arm["workers"]), {"cmd": "drop", "key": f"{preset}/{length}/{arm['name']}"})
    rows = []
    for m in args.members:
        base = "unfused" if "unfused" in rates else f"unfused/M{m}"
        ratios = [f / u for f, u in zip(rates[f"fused/M{m}"], rates[base])]
        cpu_ratios = [f / u for f, u in zip(cpu_rates[f"fused/M{m}"], cpu_rates[base])]
        rows.append(
            {
                "cell": f"{preset}/L{length}/M{m}",
                "preset": preset,
                "length": length,
                "members": m,
                "batch": cell["batch"],
                "unfused_step_seconds": round(statistics.median(seconds[base]), 6),
                "fused_step_seconds": round(statistics.median(seconds[f"fused/M{m}"]), 6),
                "unfused_member_steps_per_unit_second": round(statistics.median(rates[base]), 3),
                "fused_member_steps_per_unit_second": round(
                    statistics.median(rates[f"fused/M{m}"]), 3
                ),
                "speedup": round(statistics.median(ratios), 3),
                "round_speedups": [round(r, 3) for r in ratios],
                "cpu_time_speedup": round(statistics.median(cpu_ratios), 3),
            }
        )
        if args.graphs:  # the graphed group against the same M trials, and against one trial
            graphed = rates[f"fused_graphed/M{m}"]
            alone = rates.get("unfused/M1") or rates.get("unfused")
            rows[-1].update(
                fused_graphed_step_seconds=round(
                    statistics.median(seconds[f"fused_graphed/M{m}"]), 6
                ),
                fused_graphed_member_steps_per_unit_second=round(statistics.median(graphed), 3),
                graphed_speedup=round(
                    statistics.median([g / u for g, u in zip(graphed, rates[base])]), 3
                ),
            )
            if alone:  # one eager trial alone (M=1 among the members, or one per core)
                rows[-1]["graphed_over_one_trial"] = round(
                    statistics.median([g / u for g, u in zip(graphed, alone)]), 3
                )
        if peaks:  # GPU: allocator peak of one unfused trial's process and of the fused group's
            rows[-1]["unfused_peak_mib"] = round(peaks[base], 1)
            rows[-1]["fused_peak_mib"] = round(peaks[f"fused/M{m}"], 1)
            if args.graphs:
                rows[-1]["fused_graphed_peak_mib"] = round(peaks[f"fused_graphed/M{m}"], 1)
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # a phase cut short keeps its rows
    return rows


def mixed_shapes(args: argparse.Namespace) -> list[list[Any]]:
    """The mixed cell's members, [K, encoder scoring, decoder scoring] each, shape by shape."""
    return [
        [k, *pair.split("/")]
        for k in args.mixed_k
        for pair in args.mixed_scoring
        for _ in range(args.mixed_seeds)
    ]


def measure_mixed(
    pool: Pool, args: argparse.Namespace, preset: str, length: int
) -> list[dict[str, Any]]:
    """The mixed-axes cell of one (preset, L): the mixed group against one group per shape,
    interleaved over the rounds; one row."""
    batch, lr, clip = TRAINING[preset]
    steps = args.steps or STEPS[preset]
    shapes = mixed_shapes(args)
    n = len(shapes)
    cell = dict(preset=preset, length=length, batch=args.batch or batch, lr=lr, clip=clip,
                device=args.device, precision=args.precision, attention="memory")  # fmt: skip
    cuda = args.device.startswith("cuda")
    per_shape = [shapes[i : i + args.mixed_seeds] for i in range(0, n, args.mixed_seeds)]
    # each worker's members per arm; on CPU every worker runs the arm's whole work on its core
    plan = {
        "mixed": [shapes] * (1 if cuda else len(pool.procs)),
        "by_shape": per_shape if cuda else [shapes] * len(pool.procs),
    }
    units = 1 if cuda else len(pool.procs)
    for name, workers in plan.items():
        for w, members in enumerate(workers):
            task = {**cell, "cmd": "build", "key": f"{preset}/{length}/{name}", "fused": True,
                    "by_shape": name == "by_shape" and not cuda, "shapes": members,
                    "seed": 1000 * (0 if cuda else w)}  # fmt: skip
            pool.ask([w], task)
    rates: dict[str, list[float]] = {name: [] for name in plan}
    cpu_rates: dict[str, list[float]] = {name: [] for name in plan}
    seconds: dict[str, list[float]] = {name: [] for name in plan}
    for _ in range(args.repeats):
        for name, workers in plan.items():
            replies = pool.ask(
                range(len(workers)),
                {"cmd": "run", "key": f"{preset}/{length}/{name}", "steps": steps,
                 "device": args.device},
            )  # fmt: skip
            per_step = [r["seconds"] / steps for r in replies]
            seconds[name].append(max(per_step) if cuda else statistics.median(per_step))
            rates[name].append(sum(len(m) / s for m, s in zip(workers, per_step)) / units)
            cpu_rates[name].append(
                sum(len(m) * steps for m in workers) / sum(r["cpu_seconds"] for r in replies)
            )
    for name, workers in plan.items():
        pool.ask(range(len(workers)), {"cmd": "drop", "key": f"{preset}/{length}/{name}"})
    ratios = [m / b for m, b in zip(rates["mixed"], rates["by_shape"])]
    cpu_ratios = [m / b for m, b in zip(cpu_rates["mixed"], cpu_rates["by_shape"])]
    row = {
        "cell": f"{preset}/L{length}/mixed{n}",
        "preset": preset,
        "length": length,
        "members": n,
        "shapes": len(per_shape),
        "K": sorted(set(args.mixed_k)),
        "scoring": list(args.mixed_scoring),
        "batch": cell["batch"],
        "mixed_step_seconds": round(statistics.median(seconds["mixed"]), 6),
        "by_shape_round_seconds": round(statistics.median(seconds["by_shape"]), 6),
        "mixed_member_steps_per_unit_second": round(statistics.median(rates["mixed"]), 3),
        "by_shape_member_steps_per_unit_second": round(statistics.median(rates["by_shape"]), 3),
        "speedup": round(statistics.median(ratios), 3),
        "round_speedups": [round(r, 3) for r in ratios],
        "cpu_time_speedup": round(statistics.median(cpu_ratios), 3),
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return [row]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.worker is not None:
        worker(args.worker)
        return {}
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _machine import machine_info, machine_line

    from sweeps.timing.devices import highest_cpus, resolve_device

    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise refusal(f"--device: {exc}") from None
    if device.type == "cuda":
        shapes = len(mixed_shapes(args)) // args.mixed_seeds
        pool_cores = [-1] * (shapes if args.mixed else max(args.members))
        units = "GPU"
    else:
        available = len(os.sched_getaffinity(0))
        cores = args.cores or available
        if not 1 <= cores <= available:
            raise refusal(f"--cores {cores}: this process may use {available} core(s)")
        pool_cores = highest_cpus(cores)
        units = "core"
    machine = machine_info(device)
    load_before = os.getloadavg()[0]
    print(machine_line(machine), file=sys.stderr, flush=True)
    pool = Pool(pool_cores)
    measure = measure_mixed if args.mixed else measure_cell
    try:
        rows = [
            row
            for preset in args.presets
            for length in args.lengths
            for row in measure(pool, args, preset, length)
        ]
    finally:
        pool.close()
    result = {
        "benchmark": "fusion",
        "speedup": {row["cell"]: row["speedup"] for row in rows},
        **(
            {
                "graphed_speedup": {row["cell"]: row["graphed_speedup"] for row in rows},
                "graphed_over_one_trial": {
                    row["cell"]: row["graphed_over_one_trial"]
                    for row in rows
                    if "graphed_over_one_trial" in row
                },
            }
            if args.graphs
            else {}
        ),
        "unit": f"member-steps per {units}-second, "
        + ("mixed group / one group per shape" if args.mixed else "fused / unfused"),
        "machine": {**machine, "line": machine_line(machine)},
        "torch": torch.__version__,
        "device": str(device),
        "load": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "settings": {
            k: getattr(args, k)
            for k in (
                "presets",
                "lengths",
                "members",
                "cores",
                "batch",
                "steps",
                "repeats",
                "precision",
                "mixed",
                "graphs",
            )
        }
        | {
            "processes": len(pool_cores),
            "attention": "memory K=16" if args.attention == "memory" else args.attention,
        }
        | (
            {
                "attention": "memory, K and scoring per member",
                "mixed_k": args.mixed_k,
                "mixed_scoring": args.mixed_scoring,
                "mixed_seeds": args.mixed_seeds,
            }
            if args.mixed
            else {}
        ),
        "rows": rows,
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
