"""The attention step alone, no RNN: softmax (Bahdanau) vs hard monotonic (linear scan) vs memory
attention over source length S and output length T, the grid of Raffel et al.'s speed test.

Run it (from the repository root):

    .venv/bin/python benchmarks/attention_step.py --quick --output bench-out     # ~1 min, 2 CPU cores
    .venv/bin/python benchmarks/attention_step.py --output bench-out              # S, T in 10..1000
    .venv/bin/python benchmarks/attention_step.py --device cuda --output bench-gpu
    .venv/bin/python benchmarks/attention_step.py --square 50 128 500 --output bench-out   # S = T only

What is timed, per (mechanism, S, T): ``precompute`` over a random (B, S, D) memory, then T calls
of ``step`` with precomputed random queries (B, H), ``need_weights=False`` (the decoder's hot
path). Inputs are built before timing; one warm-up round, ``--repeats`` timed rounds
(every mechanism once per round, so a slow spell hits all alike), median; on CPU pinned to
``--threads`` cores.

Mechanisms (all with H = D = ``--dim``): ``softmax`` = Bahdanau's additive attention, O(S) per
step; ``monotonic`` = hard monotonic attention in eval mode, O(S + T) per sequence, with its energy
bias at 0 so that about half of the random energies stop the scan (it walks the source about one
position per step instead of running off the end at step one), each step a window of
``scan_chunk`` energies; ``memory`` = memory attention with ``--K`` vectors, O(S*K*D) once, then
O(K*D) per step.

The summary prints, besides the grids, one "S = T" table (milliseconds and softmax time /
mechanism time side by side) for the cells with S = T: ``--square`` runs only those.

Writes ``DIR/attention_step.csv`` (``mechanism``, ``S``, ``T``, ``seconds``, ``speedup_vs_softmax``,
``batch``, ``dim``, ``K`` (memory's rows), ``device``, ``threads``), ``DIR/attention_step.md``
(speed-up grids, rows S, columns T, the machine named; with ``--square`` the S = T table alone)
and ``DIR/attention_step.png`` (speed-up heatmaps).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import nonnegative_int, positive_int  # noqa: E402
from _machine import (  # noqa: E402
    announced,
    markdown_table,
    pyplot_or_none,
    save_png,
    time_interleaved,
    write_outputs,
)

from lightning_modules.attention import build_attention  # noqa: E402
from lightning_modules.attention.base import Attention  # noqa: E402
from sweeps.layout import output_folder  # noqa: E402
from sweeps.timing.devices import resolve_device  # noqa: E402

FULL_SIZES = [10, 50, 100, 500, 1000]
QUICK_SOURCES, QUICK_TARGETS = [10, 100, 500], [10, 100]
MECHANISMS = ["softmax", "monotonic", "memory"]


def build(mechanism: str, dim: int, K: int, device: torch.device) -> Attention:
    """One mechanism in eval mode."""
    if mechanism == "softmax":
        attn = build_attention("bahdanau", dim, dim)
    elif mechanism == "monotonic":
        attn = build_attention("monotonic", dim, dim, score_bias_init=0.0)
    elif mechanism == "memory":
        attn = build_attention("memory", dim, dim, K=K)
    else:
        raise SystemExit(f"unknown mechanism {mechanism!r}; choose from {MECHANISMS}")
    return attn.eval().to(device)


def attend(
    attn: Attention, memory: torch.Tensor, mask: torch.Tensor, queries: torch.Tensor
) -> torch.Tensor:
    """precompute, then one step per query row; returns the last context (B, D)."""
    with torch.inference_mode():
        cache = attn.precompute(memory, mask)
        state = attn.initial_state(cache)
        ctx = queries[0]
        for query in queries:  # (B, H) each
            ctx, state, _ = attn.step(query, cache, state, False)  # (B, D)
    return ctx


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    models = {m: build(m, args.dim, args.K, device) for m in args.mechanisms}
    rows = []
    for S in args.sources:
        memory = torch.randn(args.batch, S, args.dim, device=device)  # (B, S, D)
        mask = torch.ones(args.batch, S, dtype=torch.bool, device=device)  # (B, S)
        for T in [S] if args.square else args.targets:
            queries = torch.randn(T, args.batch, args.dim, device=device)  # (T, B, H)
            fns = {
                name: (lambda a=attn: attend(a, memory, mask, queries))
                for name, attn in models.items()
            }
            cell = {
                name: median
                for name, (median, _) in time_interleaved(
                    fns, device, args.warmup, args.repeats
                ).items()
            }
            for name, seconds in cell.items():
                speedup = cell["softmax"] / seconds if "softmax" in cell else float("nan")
                rows.append(
                    {
                        "mechanism": name,
                        "S": S,
                        "T": T,
                        "seconds": round(seconds, 7),
                        "speedup_vs_softmax": round(speedup, 3),
                        "batch": args.batch,
                        "dim": args.dim,
                        "K": args.K if name == "memory" else "",
                        "device": str(device),
                        "threads": torch.get_num_threads(),
                    }
                )
            if not args.silent:
                print(
                    f"  S={S:<5} T={T:<5} "
                    + "  ".join(f"{k} {v * 1e3:8.2f} ms" for k, v in cell.items()),
                    flush=True,
                )
    return rows


def square_table(rows: Sequence[dict[str, Any]]) -> Any:
    """The S = T cells side by side: milliseconds per mechanism and softmax / mechanism time.

    Returns a pandas DataFrame indexed by S (= T), or None when no cell has S = T."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[df["S"] == df["T"]]
    if df.empty:
        return None
    table = df.pivot(index="S", columns="mechanism", values="seconds") * 1e3  # ms
    table = table[list(dict.fromkeys(df["mechanism"]))].rename(columns=lambda m: f"{m} ms")
    if "softmax" in set(df["mechanism"]):
        for name in dict.fromkeys(df["mechanism"]):
            if name != "softmax":
                speed = df[df["mechanism"] == name].set_index("S")["speedup_vs_softmax"]
                table[f"softmax / {name}"] = speed
    return table


def summarise(rows: Sequence[dict[str, Any]]) -> str:
    """The S = T table, then seconds and speed-up grids (rows S, columns T), as Markdown."""
    import pandas as pd

    df = pd.DataFrame(rows)
    lines: list[str] = []
    square = square_table(rows)
    if square is not None:
        lines += [
            "### S = T: milliseconds for precompute + T steps, and softmax time / mechanism time",
            "",
        ]
        lines += [markdown_table(square, ".2f", "", "S=T="), ""]
        if (df["S"] == df["T"]).all():  # --square: the grids would only repeat their diagonals
            return "\n".join(lines)
    for name, g in df.groupby("mechanism", sort=False):
        table = g.pivot(index="S", columns="T", values="seconds") * 1e3
        lines += [
            f"### {name}: milliseconds for precompute + T steps",
            "",
            markdown_table(table, ".3f", "T=", "S="),
            "",
        ]
        if name != "softmax" and g["speedup_vs_softmax"].notna().all():
            speed = g.pivot(index="S", columns="T", values="speedup_vs_softmax")
            lines += [
                f"### softmax time / {name} time",
                "",
                markdown_table(speed, ".2f", "T=", "S="),
                "",
            ]
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """One heatmap of softmax time / mechanism time per non-softmax mechanism."""
    plt = pyplot_or_none()
    if plt is None:
        return None
    import pandas as pd

    df = pd.DataFrame(rows)
    others = [m for m in dict.fromkeys(df["mechanism"]) if m != "softmax"]
    if "softmax" not in set(df["mechanism"]) or not others:
        return None
    fig, axes = plt.subplots(1, len(others), figsize=(4.6 * len(others), 3.8), squeeze=False)
    for ax, name in zip(axes[0], others):
        grid = df[df["mechanism"] == name].pivot(
            index="S", columns="T", values="speedup_vs_softmax"
        )
        image = ax.imshow(grid.values, origin="lower", cmap="magma", aspect="auto")
        for (i, j), value in __import__("numpy").ndenumerate(grid.values):
            ax.text(j, i, f"{value:.1f}x", ha="center", va="center", color="cyan", fontsize=8)
        ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(i) for i in grid.index])
        ax.set_xlabel("T (output steps)")
        ax.set_ylabel("S (source length)")
        ax.set_title(f"softmax / {name} time")
        fig.colorbar(image, ax=ax)
    return save_png(fig, path)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--output", type=output_folder, default=Path("bench-out"))
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"S in {QUICK_SOURCES}, T in {QUICK_TARGETS}, 3 repeats",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument("--mechanisms", nargs="+", default=MECHANISMS, choices=MECHANISMS)
    p.add_argument(
        "--sources", nargs="+", type=positive_int, help=f"source lengths S (default {FULL_SIZES})"
    )
    p.add_argument(
        "--targets", nargs="+", type=positive_int, help=f"output lengths T (default {FULL_SIZES})"
    )
    p.add_argument(
        "--square", nargs="+", type=positive_int, help="run only the cells S = T for these sizes"
    )
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--dim", type=positive_int, default=256, help="H = D = attention width")
    p.add_argument(
        "--K", type=positive_int, default=32, help="memory vectors of the memory mechanism"
    )
    p.add_argument(
        "--repeats", type=positive_int, help="timed runs per cell (default 5; 3 with --quick)"
    )
    p.add_argument("--warmup", type=nonnegative_int, default=1)
    p.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--silent", action="store_true")
    args = p.parse_args(argv)
    if args.square and (args.sources or args.targets):
        p.error("--square runs S = T cells; give it the sizes instead of --sources/--targets")
    args.sources = args.square or args.sources or (QUICK_SOURCES if args.quick else FULL_SIZES)
    args.targets = args.targets or (QUICK_TARGETS if args.quick else FULL_SIZES)
    args.repeats = args.repeats or (3 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Path]:
    """Run the benchmark; returns the paths written (csv, md, png)."""
    args = parse_args(argv)
    # memory attention's K only where memory attention runs
    memory = f", memory K = {args.K}" if "memory" in args.mechanisms else ""
    settings = f"batch {args.batch}, H = D = {args.dim}{memory}, median of {args.repeats}"
    with announced(args.device, args.threads, settings) as header:
        rows = run(args)
    return write_outputs(
        rows,
        args.output,
        "attention_step",
        "Attention step alone",
        header,
        settings,
        summarise,
        plot,
    )


if __name__ == "__main__":
    main()
