"""The training step with CUDA graphs against the eager step (lightning_modules/cuda_graphs.py):
seconds per step of one trial, as ``trainer.cuda_graphs: true`` trains it and as it trains without.

Run it (from the repository root):

    .venv/bin/python benchmarks/cuda_graphs.py --device cuda                 # tiny and paper_copy, L=40
    .venv/bin/python benchmarks/cuda_graphs.py --device cuda --lengths 10 40 --presets tiny
    .venv/bin/python benchmarks/cuda_graphs.py --quick                       # seconds, on the CPU: proves it runs
    .venv/bin/python benchmarks/cuda_graphs.py --quick --device cuda         # seconds, graphs captured

Prints ONE JSON line on stdout (progress on stderr): ``speedup`` maps ``<preset>/L<L>`` to the
eager step's seconds over the graphed step's (above 1: graphs are faster); ``rows`` has per cell
``eager_step_seconds`` (what a trial's step is today: ``Seq2SeqModule.training_step``, backward,
gradient-norm clipping where the sweep clips, Adam), ``graphed_step_seconds`` (the same step
replayed from a CUDA graph, :class:`GraphedSteps`) and ``static_eager_step_seconds`` (the graphed
step's code run without a graph: the masked encoder's own cost, apart from the launches saved),
the graphs captured and the steps that ran eagerly; plus ``machine``, ``torch``, ``cuda`` (torch's
CUDA and the driver, where there is one), ``device`` and ``settings``.

What is timed: memory attention with K=16 on copy-task batches as the datamodule makes them
(random lengths up to L plus EOS, padded to the batch's longest), a pool of ``POOL`` batches
cycled, the batch size, learning rate and clipping the sweep files set per preset (tiny: 64, 3e-3,
clipped at 1.0; paper_copy: 128, 1e-4, unclipped). The graphs are captured in an untimed warm-up
(every batch of the pool once); then ``--repeats`` rounds, each running ``--steps`` steps of every
arm in turn, CUDA synchronised around each; the medians. On the CPU (``--device cpu``) no graph is
captured: ``graphed`` is the static step run eagerly, and the figures say nothing about graphs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import positive_int, preset_name, quick_settings, refusal  # noqa: E402
from _machine import announced, cuda_versions, machine_info, time_interleaved  # noqa: E402

from datamodules import CopyTaskDataModule  # noqa: E402
from lightning_modules import Seq2SeqModule  # noqa: E402
from lightning_modules.cuda_graphs import GraphedSteps  # noqa: E402
from sweeps.timing.train import quiet_logging  # noqa: E402

PRESETS = ["tiny", "paper_copy"]
LENGTHS = [40]
#: the sweep files' training settings per preset: batch, lr, gradient_clip_val
TRAINING = {"tiny": (64, 3e-3, 1.0), "paper_copy": (128, 1e-4, 0.0), "paper_wmt": (128, 1e-4, 0.0)}
STEPS = {"tiny": 20, "paper_copy": 10, "paper_wmt": 4}
POOL = 4
QUICK = dict(presets=["tiny"], lengths=[6], batch=8, steps=2, repeats=2)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", type=preset_name, default=PRESETS, help="model presets")
    p.add_argument(
        "--lengths", nargs="+", type=positive_int, default=LENGTHS, help="copy-task max lengths"
    )
    p.add_argument(
        "--device",
        default=None,
        help="cuda[:N] (default; cpu with --quick) or cpu (no graphs: a smoke)",
    )
    p.add_argument(
        "--batch", type=positive_int, default=None, help="sentences per batch (the sweep's)"
    )
    p.add_argument(
        "--steps", type=positive_int, default=None, help="steps per timed call (per preset)"
    )
    p.add_argument("--repeats", type=positive_int, default=7, help="timed rounds (default 7)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="seconds, on the CPU unless --device is given: " + str(QUICK) + " where not given",
    )
    args = p.parse_args(argv)
    if args.quick:
        quick_settings(p, args, QUICK, argv)
    # --quick alone: a smoke on the CPU, on any machine; not a word of the device: the GPU default
    args.device_default = args.device is None and not args.quick
    if args.device is None:
        args.device = "cpu" if args.quick else "cuda"
    return args


def batches(length: int, batch: int, seed: int, device: torch.device) -> tuple[list[dict], Any]:
    """``POOL`` copy-task training batches on ``device``, and their (set-up) datamodule."""
    dm = CopyTaskDataModule(
        vocab_size=20, max_length=length, train_size=batch * POOL, val_size=1, test_size=0,
        batch_size=batch, seed=seed,
    )  # fmt: skip
    dm.setup("fit")
    loader = iter(dm.train_dataloader())
    return [{k: v.to(device) for k, v in next(loader).items()} for _ in range(POOL)], dm


def build(preset: str, lr: float, dm: Any, seed: int, device: torch.device) -> Seq2SeqModule:
    torch.manual_seed(seed)
    return Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="memory", attention_kwargs={"K": 16},
        preset=preset, max_source_len=dm.max_source_len, lr=lr, val_decode=False,
    ).to(device).train()  # fmt: skip


def eager_runner(module: Seq2SeqModule, pool: list[dict], clip: float, steps: int) -> Callable:
    """A trial's step today, as Lightning's automatic optimisation runs it."""
    optimizer = module.configure_optimizers()
    state = {"i": 0}

    def run() -> None:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = module.training_step(pool[state["i"] % POOL], state["i"])
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
            optimizer.step()
            state["i"] += 1

    return run


def graphed_runner(
    module: Seq2SeqModule, pool: list[dict], clip: float, steps: int, capture: bool
) -> tuple[Callable, GraphedSteps]:
    optimizer = torch.optim.Adam(module.parameters(), lr=module.hparams.lr, capturable=capture)
    graphed = GraphedSteps(module.model, optimizer, module.hparams.pad_id, clip, capture=capture)
    state = {"i": 0}

    def run() -> None:
        for _ in range(steps):
            graphed.step(pool[state["i"] % POOL])
            state["i"] += 1

    for batch in pool:  # every shape captured before anything is timed
        graphed.step(batch)
    return run, graphed


def measure_cell(args: argparse.Namespace, device: torch.device, preset: str, length: int) -> dict:
    batch, lr, clip = TRAINING[preset]
    batch = args.batch or batch
    steps = args.steps or STEPS[preset]
    pool, dm = batches(length, batch, args.seed, device)
    on_cuda = device.type == "cuda"
    graphed, steps_object = graphed_runner(
        build(preset, lr, dm, args.seed, device), pool, clip, steps, capture=on_cuda
    )
    static, _ = graphed_runner(
        build(preset, lr, dm, args.seed, device), pool, clip, steps, capture=False
    )
    eager = eager_runner(build(preset, lr, dm, args.seed, device), pool, clip, steps)
    timed = time_interleaved(
        {"eager": eager, "graphed": graphed, "static_eager": static}, device, 1, args.repeats
    )
    per_step = {name: median / steps for name, (median, _) in timed.items()}
    row = {
        "cell": f"{preset}/L{length}",
        "preset": preset,
        "length": length,
        "batch": batch,
        "captured": on_cuda,
        "graphs": steps_object.graphs,
        "steps_without_graph": steps_object.eager_steps,  # shapes past MAX_GRAPHS (all, on CPU)
        **{f"{name}_step_seconds": round(s, 6) for name, s in per_step.items()},
        "speedup": round(per_step["eager"] / per_step["graphed"], 3),
        "static_eager_over_eager": round(per_step["static_eager"] / per_step["eager"], 3),
        "round_seconds": {
            name: [round(t / steps, 6) for t in times] for name, (_, times) in timed.items()
        },
    }
    print(f"{row['cell']}: graphed {row['speedup']}x eager", file=sys.stderr, flush=True)
    return row


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if vars(args).pop("device_default") and not torch.cuda.is_available():
        raise refusal(
            "--device: this benchmark times CUDA graphs on cuda by default, but torch sees no CUDA "
            "device; on a machine without a GPU give --device cpu (no graphs: a smoke) or --quick "
            "(seconds, on the CPU)"
        )
    load_before = os.getloadavg()[0]
    settings = f"settings: {vars(args)}"
    # the machine and settings lines go to stderr: stdout holds the JSON line alone
    with contextlib.redirect_stdout(sys.stderr), announced(args.device, 1, settings) as header:
        device = torch.device(args.device)
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = False
        with quiet_logging():
            rows = [measure_cell(args, device, p, L) for p in args.presets for L in args.lengths]
        machine = machine_info(device)
    result = {
        "benchmark": "cuda_graphs",
        "speedup": {row["cell"]: row["speedup"] for row in rows},
        "unit": "eager step seconds / graphed step seconds",
        "machine": {**machine, "line": header},
        "torch": torch.__version__,
        "cuda": cuda_versions(),
        "device": str(device),
        "load": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "settings": {
            k: getattr(args, k) for k in ("presets", "lengths", "batch", "steps", "repeats")
        }
        | {"attention": "memory K=16", "pool": POOL},
        "rows": rows,
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
