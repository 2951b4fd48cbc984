"""Decode speed per attention mechanism and source length, greedy and beam: Britz et al.'s Table 1
timing column (and Raffel et al.'s claim for hard monotonic attention), measured side by side.

Run it (from the repository root):

    .venv/bin/python benchmarks/decode_speed.py --quick --output bench-out        # < 3 min, 2 CPU cores
    .venv/bin/python benchmarks/decode_speed.py --output bench-out                # the full grid
    .venv/bin/python benchmarks/decode_speed.py --device cuda --threads 4 --output bench-gpu
    .venv/bin/python benchmarks/decode_speed.py --mechanisms none memory:K=32 bahdanau \\
        --lengths 50 200 --batch 16 --output bench-out     # the headline ratios, greedy and beam 10

Writes ``DIR/decode_speed.csv`` (one row per mechanism x length x mode: ``mechanism``, ``length``,
``mode``, ``seconds`` = median over the repeats, ``per_step_ms``, ``min_seconds``, ``repeats``,
``batch``, ``beam``, ``steps``, ``preset``, ``device``, ``threads``), ``DIR/decode_speed.png``
(seconds vs length, one panel per mode) and ``DIR/decode_speed.md`` (the printed tables and ratios,
with the machine named). The first table puts the headline ratios side by side, greedy and beam:
each memory spec's time / no-attention time and Bahdanau's time / each memory spec's time.

What is timed: ``Seq2Seq.greedy_decode`` / ``Seq2Seq.beam_search`` (encoder, attention
precompute, the decode loop, beam bookkeeping and backtracking) on one fixed batch that is
already on the device; building the batch and the model is not timed. One untimed warm-up round,
then ``--repeats`` timed rounds, each round decoding once with every mechanism in turn (so a slow
spell of the machine falls on all of them alike); the median per mechanism is reported. On CPU
the process is pinned to ``--threads`` cores (the highest-numbered), so it does not migrate.

Every mechanism does the same work: the models have random weights, so left alone they would
emit EOS at different steps. The decode runs with ``min_len = max_len = L + 1`` (EOS masked out
until the last step), i.e. exactly the L + 1 steps a perfect copy model takes on a length-L copy
task, for every mechanism, greedy and beam alike. Every sentence in the batch has length L.

Mechanisms are given as ``name[:key=value,...]``: ``none``, ``memory:K=32``, ``bahdanau``,
``luong`` (= ``luong_general``), ``local`` (= ``local_p``), ``monotonic``, or any registered name
with options. The model is the same for all (``--preset``, default ``paper_copy``: 2-layer
bidirectional 256-unit encoder, 2-layer 256-unit decoder). Hard monotonic attention is built with
its energy bias at 0 instead of -4: with random weights about half of the energies then exceed the
0.5 threshold, so the scan walks the source roughly one position per step, as a trained model
on a monotone task would, instead of running off the end at the first step and attending nowhere
(which would make it look as cheap as no attention).
"""

from __future__ import annotations

import argparse
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
    refuse_unbuildable,
    split_mechanism,
)
from _machine import (  # noqa: E402
    announced,
    markdown_table,
    pyplot_or_none,
    save_png,
    time_interleaved,
    write_outputs,
)

from datamodules.vocab import EOS_ID, FIRST_SYMBOL  # noqa: E402
from lightning_modules.seq2seq import Seq2Seq  # noqa: E402
from sweeps.layout import output_folder  # noqa: E402
from sweeps.timing.devices import resolve_device  # noqa: E402

FULL_MECHANISMS = [
    "none",
    "memory:K=1",
    "memory:K=4",
    "memory:K=16",
    "memory:K=32",
    "memory:K=64",
    "bahdanau",
    "luong",
    "local",
    "monotonic",
]
FULL_LENGTHS = [10, 50, 100, 200, 400, 800]
QUICK_MECHANISMS = ["none", "memory:K=4", "memory:K=32", "bahdanau", "luong", "local", "monotonic"]
QUICK_LENGTHS = [10, 50, 200]
VOCAB = 20 + FIRST_SYMBOL  # the copy task's: 20 symbols after the special ids
#: options the benchmark adds to a mechanism unless the spec sets them (see the module docstring)
BENCH_DEFAULTS: dict[str, dict[str, Any]] = {"monotonic": {"score_bias_init": 0.0}}


def parse_mechanism(spec: str) -> tuple[str, dict[str, Any]]:
    """``"memory:K=32,position_encoding=true"`` -> ("memory", {"K": 32, "position_encoding": True}),
    with the benchmark's own defaults (:data:`BENCH_DEFAULTS`) where the spec leaves them."""
    name, given = split_mechanism(spec)
    return name, {**BENCH_DEFAULTS.get(name, {}), **given}


def build_model(spec: str, length: int, preset: str, device: torch.device, seed: int) -> Seq2Seq:
    """The benchmark's model for one mechanism, eval mode, on ``device``."""
    name, options = parse_mechanism(spec)
    torch.manual_seed(seed)
    model = Seq2Seq.from_preset(
        preset,
        VOCAB,
        VOCAB,
        attention=name,
        attention_kwargs=options,
        max_source_len=length + 1,
        dropout=0.0,
    )
    return model.eval().to(device)


def make_batch(
    batch: int, length: int, device: torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy-task batch: ``batch`` sentences of exactly ``length`` symbols, then EOS."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(FIRST_SYMBOL, VOCAB, (batch, length + 1), generator=gen)  # (B, L + 1)
    src[:, -1] = EOS_ID
    lengths = torch.full((batch,), length + 1, dtype=torch.long)  # (B,)
    return src.to(device), lengths.to(device)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Time every mechanism x length x mode; returns the CSV rows."""
    device = resolve_device(args.device)
    rows = []
    for length in args.lengths:
        src, src_lengths = make_batch(args.batch, length, device, args.seed)
        steps = length + 1
        models = {
            spec: build_model(spec, length, args.preset, device, args.seed)
            for spec in args.mechanisms
        }
        for mode in args.modes:
            fns = {}
            for spec, model in models.items():
                if mode == "greedy":
                    fns[spec] = lambda m=model: m.greedy_decode(
                        src, src_lengths, max_len=steps, min_len=steps
                    )
                else:
                    fns[spec] = lambda m=model: m.beam_search(
                        src, src_lengths, beam_size=args.beam, max_len=steps, min_len=steps
                    )
            # every mechanism once per round: a slow spell of the machine hits all alike
            for spec, (median, times) in time_interleaved(
                fns, device, args.warmup, args.repeats
            ).items():
                rows.append(
                    {
                        "mechanism": spec,
                        "length": length,
                        "mode": mode,
                        "seconds": round(median, 6),
                        "per_step_ms": round(1000 * median / steps, 4),
                        "min_seconds": round(min(times), 6),
                        "repeats": args.repeats,
                        "batch": args.batch,
                        "beam": args.beam if mode == "beam" else 1,
                        "steps": steps,
                        "preset": args.preset,
                        "device": str(device),
                        "threads": torch.get_num_threads(),
                    }
                )
                if not args.silent:
                    print(f"  {spec:>14} L={length:<4} {mode:<6} {median:8.4f} s", flush=True)
        del models
    return rows


def ratio_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The headline ratios: per mode and length, memory / none and bahdanau / memory (median
    seconds), for every memory spec present. Returns dicts with ``mode``, ``length``,
    ``numerator``, ``denominator``, ``ratio``."""
    seconds = {(r["mode"], r["length"], r["mechanism"]): r["seconds"] for r in rows}
    specs = list(dict.fromkeys(r["mechanism"] for r in rows))
    memories = [m for m in specs if m.startswith("memory")]
    pairs = [(m, "none") for m in memories] + [("bahdanau", m) for m in memories]
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        for length in dict.fromkeys(r["length"] for r in rows):
            for num, den in pairs:
                if (mode, length, num) in seconds and (mode, length, den) in seconds:
                    ratio = seconds[(mode, length, num)] / seconds[(mode, length, den)]
                    out.append(
                        {
                            "mode": mode,
                            "length": length,
                            "numerator": num,
                            "denominator": den,
                            "ratio": ratio,
                        }
                    )
    return out


def summarise(rows: Sequence[dict[str, Any]]) -> str:
    """The headline ratios side by side, then the seconds table (mechanism x length, per mode)
    and the ratios per mode, as Markdown."""
    import pandas as pd

    df = pd.DataFrame(rows)
    order = list(dict.fromkeys(df["mechanism"]))
    lines: list[str] = []
    headline = ratio_rows(rows)
    if headline:
        beam = next((r["beam"] for r in rows if r["mode"] == "beam"), None)
        hd = pd.DataFrame(headline)
        hd["ratio_name"] = hd["numerator"] + " / " + hd["denominator"]
        hd["column"] = (
            hd["mode"].map(lambda m: f"beam {beam}" if m == "beam" else m)
            + ", L="
            + hd["length"].astype(str)
        )
        table = hd.pivot(index="ratio_name", columns="column", values="ratio")
        table = table.reindex(
            index=list(dict.fromkeys(hd["ratio_name"])), columns=list(dict.fromkeys(hd["column"]))
        )
        lines += ["### Headline ratios (median decode time)", "", markdown_table(table, ".3f"), ""]
    for mode, g in df.groupby("mode", sort=False):
        table = g.pivot(index="mechanism", columns="length", values="seconds").reindex(order)
        lines += [
            f"### Decode seconds, {mode} (median)",
            "",
            markdown_table(table, ".4f", "L="),
            "",
        ]
        if "none" in table.index:
            ratio = table.div(table.loc["none"], axis=1).drop(index="none")
            lines += [
                f"### {mode}: time / no-attention time",
                "",
                markdown_table(ratio, ".2f", "L="),
                "",
            ]
        memories = [m for m in table.index if m.startswith("memory")]
        if "bahdanau" in table.index and memories:
            ratio = (table.loc["bahdanau"] / table.loc[memories]).rename(
                index=lambda m: f"bahdanau / {m}"
            )
            lines += [
                f"### {mode}: Bahdanau time / memory time",
                "",
                markdown_table(ratio, ".2f", "L="),
                "",
            ]
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Seconds vs length (log-log), one line per mechanism, one panel per mode."""
    plt = pyplot_or_none()
    if plt is None:
        return None
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4.2), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for spec in dict.fromkeys(r["mechanism"] for r in rows):
            pts = sorted(
                (r["length"], r["seconds"])
                for r in rows
                if r["mode"] == mode and r["mechanism"] == spec
            )
            style = "--" if spec == "none" else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3, label=spec)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("source length L (decode L + 1 steps)")
        ax.set_ylabel("seconds per batch (median)")
        # the beam size of this panel's own rows (a greedy row's "beam" is 1)
        beam = next((r.get("beam", "") for r in rows if r["mode"] == mode), "")
        ax.set_title(f"{mode} decoding" + (f" (beam {beam})" if mode == "beam" else ""))
        ax.grid(True, which="both", alpha=0.3)
    axes[0, -1].legend(fontsize=7)
    return save_png(fig, path)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--output",
        type=output_folder,
        default=Path("bench-out"),
        help="folder for the CSV, PNG and Markdown",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_MECHANISMS} x L in {QUICK_LENGTHS}, fewer repeats",
    )
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    p.add_argument(
        "--mechanisms", nargs="+", type=mechanism_spec, help=f"default {FULL_MECHANISMS}"
    )
    p.add_argument("--lengths", nargs="+", type=positive_int, help=f"default {FULL_LENGTHS}")
    p.add_argument("--modes", nargs="+", choices=["greedy", "beam"], default=["greedy", "beam"])
    p.add_argument(
        "--preset",
        type=preset_name,
        default="paper_copy",
        help="model size preset (the same for every mechanism)",
    )
    p.add_argument(
        "--batch", type=positive_int, help="sentences per batch (default 32; 4 with --quick)"
    )
    p.add_argument("--beam", type=positive_int, default=10, help="beam size of the beam mode")
    p.add_argument(
        "--repeats", type=positive_int, help="timed runs per cell (default 5; 3 with --quick)"
    )
    p.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed runs per cell")
    p.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--silent", action="store_true", help="no per-cell progress lines")
    args = p.parse_args(argv)
    args.mechanisms = args.mechanisms or (QUICK_MECHANISMS if args.quick else FULL_MECHANISMS)
    args.lengths = args.lengths or (QUICK_LENGTHS if args.quick else FULL_LENGTHS)
    args.batch = args.batch or (4 if args.quick else 32)
    args.repeats = args.repeats or (3 if args.quick else 5)
    refuse_unbuildable(
        p,
        args.mechanisms,
        lambda spec: build_model(spec, max(args.lengths), args.preset, torch.device("cpu"), 0),
    )
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Path]:
    """Run the benchmark; returns the paths written (csv, md, png)."""
    args = parse_args(argv)
    settings = (
        f"model {args.preset}, batch {args.batch}, beam {args.beam}, {args.warmup} warm-up + "
        f"{args.repeats} timed runs (median), exactly L + 1 decode steps"
    )
    with announced(args.device, args.threads, settings) as header:
        rows = run(args)
    return write_outputs(
        rows, args.output, "decode_speed", "Decode speed", header, settings, summarise, plot
    )


if __name__ == "__main__":
    main()
