"""Attention heatmaps as PNGs, from a trained checkpoint or a freshly built (untrained) model.

    python -m sweeps.heatmaps sweep-results/k_vs_length/.../checkpoint.ckpt --output heatmaps [--n 4]
    python -m sweeps.heatmaps --attention memory --K 16 --output heatmaps     # untrained, copy task

Writes ``DIR/<attention>_<i>.png`` (``memory_K16_0.png`` for memory attention), one per validation
sentence (the first ``--n``), each recording what it was drawn from (PNG text ``Source``): drawn
again from the same checkpoint, the folder's earlier files of it are replaced (those past the new
``--n`` removed); a folder holding the same names drawn from another checkpoint is refused, so one
checkpoint's heatmaps never overwrite another's. The alignment for every mechanism, and for memory attention the paper's Fig. 6-8 panels (alpha, beta, the
combined alignment and the per-vector alignments; see :func:`sweeps.report.figures.heatmap_figure`),
every panel on one colour scale of attention weights, 0 to 1.

What is drawn: for a trial's checkpoint, the first ``--n`` sentences of the trial's own validation
set, in its order: the copy task is rebuilt from the data settings the checkpoint stores (its
seed, lengths, vocabulary and validation size, written by ``trainer.fit(model, datamodule=dm)``),
so these are the sentences of the trial's ``val_references.txt`` and of the heatmaps it logged to
W&B. ``--data-seed``, ``--min-length``, ``--max-length`` and ``--vocab-size`` override a stored
setting (another draw, no longer the trial's sentences). A checkpoint that stores no data
settings, and an untrained ``--attention`` model, get a new draw of the copy task:
``vocab_size = src_vocab_size - 4``, ``max_length = max_source_len - 1``, lengths from 1, seed 0
(or the options), ``--n`` sentences. Checkpoints of other tasks are not supported by this
command: call ``Seq2SeqModule.attention_heatmaps`` on one of their batches and
``heatmap_figure`` directly.
"""

from __future__ import annotations

import argparse
import inspect
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from datamodules import CopyTaskDataModule
from datamodules.vocab import FIRST_SYMBOL
from lightning_modules import ATTENTION_REGISTRY, Seq2SeqModule
from lightning_modules.attention import attention_options
from sweeps.errors import TimingError
from sweeps.layout import nonnegative_int, output_folder, positive_int
from sweeps.report.figures import heatmap_figure, save_figure
from sweeps.timing.checkpoint import read_settings
from sweeps.timing.files import command_checkpoint

#: the settings of the copy task a checkpoint stores that decide its validation sentences (the
#: training and test sizes, the batch size and the workers do not: each split has its own seed)
VALIDATION_SETTINGS = ("vocab_size", "max_length", "min_length", "val_size", "seed")
#: the options that override a stored setting, by setting
OVERRIDES = {
    "vocab_size": "vocab_size",
    "max_length": "max_length",
    "min_length": "min_length",
    "seed": "data_seed",
}


def load_module(args: argparse.Namespace) -> Seq2SeqModule:
    """The checkpoint's module, or a fresh one for ``--attention`` (seeded, eval mode, CPU)."""
    if args.checkpoint is not None:
        module = Seq2SeqModule.load_from_checkpoint(str(args.checkpoint), map_location="cpu")
    else:
        torch.manual_seed(args.seed)
        vocab = (args.vocab_size or 20) + FIRST_SYMBOL
        takes_k = "K" in attention_options(args.attention)  # memory attention's K
        kwargs: dict[str, Any] = {"K": args.K} if takes_k and args.K is not None else {}
        module = Seq2SeqModule(
            vocab,
            vocab,
            attention=args.attention,
            attention_kwargs=kwargs,
            preset=args.preset,
            max_source_len=(args.max_length or 10) + 1,
            # a mechanism that scores q^T s_j needs D == H: a unidirectional encoder gives it that
            bidirectional=False if ATTENTION_REGISTRY[args.attention].equal_sizes else None,
        )
    return module.eval()


def copy_task_settings(saved: dict[str, Any]) -> str | None:
    """Why a checkpoint's stored data settings are not the copy task's (None: they are, or it
    stores none)."""
    params = inspect.signature(CopyTaskDataModule.__init__).parameters
    foreign = sorted(set(saved) - set(params))
    if saved and foreign:
        return (
            f"the checkpoint was trained on other data than the copy task (its data settings "
            f"include {', '.join(foreign)}); this command draws copy-task checkpoints: call "
            "Seq2SeqModule.attention_heatmaps on one of its batches and heatmap_figure directly"
        )
    return None


def data_settings(
    module: Seq2SeqModule, args: argparse.Namespace, saved: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The copy task whose validation sentences are drawn (:data:`VALIDATION_SETTINGS`): the one
    ``saved`` in the checkpoint (the trial's own), each option given overriding its setting;
    without saved settings a new draw for the module's vocabulary and longest source."""
    hp = module.hparams
    if saved:
        settings = {k: saved[k] for k in VALIDATION_SETTINGS if k in saved}
    else:
        settings = {
            "vocab_size": int(hp.src_vocab_size) - FIRST_SYMBOL,
            "max_length": int(hp.max_source_len) - 1,
            "min_length": 1,
            "val_size": max(args.n, 1),
            "seed": 0,
        }
    for setting, option in OVERRIDES.items():
        if getattr(args, option) is not None:
            settings[setting] = getattr(args, option)
    if not saved:  # a new draw: lengths from 1, unless that is above the longest
        settings["min_length"] = min(settings["min_length"], settings["max_length"])
    return settings


def build_datamodule(
    module: Seq2SeqModule, args: argparse.Namespace, saved: dict[str, Any] | None = None
) -> CopyTaskDataModule:
    """The copy task of :func:`data_settings`, set up: its validation split is the trial's (from
    ``saved``, the checkpoint's data settings) or a new draw; its first batch holds ``--n``
    sentences."""
    dm = CopyTaskDataModule(
        **data_settings(module, args, saved),
        train_size=1,  # each split is drawn from its own seed: the validation split is the same
        test_size=0,
        batch_size=max(args.n, 1),
    )
    dm.setup("fit")
    return dm


#: the PNG text field naming what a heatmap was drawn from (a checkpoint, or an untrained model)
SOURCE_KEY = "Source"


def drawn_before(out_dir: Path, prefix: str) -> dict[Path, str | None]:
    """The heatmaps already in ``out_dir`` under ``prefix`` (``<prefix>_<i>.png``), each with the
    source it records (None: a PNG that records none)."""
    found: dict[Path, str | None] = {}
    for path in sorted(out_dir.glob(f"{prefix}_*.png")):
        if not path.stem[len(prefix) + 1 :].isdigit():
            continue
        try:
            with Image.open(path) as image:
                found[path] = image.info.get(SOURCE_KEY)
        except (OSError, SyntaxError):  # not an image PIL reads: not one of these heatmaps
            found[path] = None
    return found


def other_source(out_dir: Path, prefix: str, source: str) -> str | None:
    """Why the heatmaps of ``source`` may not be written into ``out_dir`` (None: they may): the
    folder holds files of the same names drawn from something else, which they would replace."""
    others = {s for s in drawn_before(out_dir, prefix).values() if s not in (None, source)}
    if not others:
        return None
    return (
        f"{out_dir} already holds {prefix}_<i>.png drawn from {sorted(others)[0]}, which these "
        f"heatmaps of {source} would overwrite: give another --output (or remove those files)"
    )


def write_heatmaps(
    module: Seq2SeqModule,
    batch: dict[str, Any],
    out_dir: Path,
    n: int,
    prefix: str,
    source: str | None = None,
) -> list[Path]:
    """One PNG per sentence of ``batch`` (the first ``n``), each recording ``source``; returns the
    paths. Heatmaps of an earlier drawing of the same source past the last one written go: the
    folder holds this drawing's sentences only."""
    earlier = drawn_before(out_dir, prefix)
    items = module.attention_heatmaps(batch, max_items=n)
    if items and not any(item["weights"].any() for item in items):
        print(  # (no attention at all, or one that gave every position 0)
            f"note: {module.hparams.attention}'s weights are 0 at every position of every "
            "sentence: the panels show the sentences and an empty alignment",
            flush=True,
        )
    metadata = {SOURCE_KEY: source} if source else None
    paths = []
    for i, item in enumerate(items):
        fig = heatmap_figure(item, title=f"{prefix} #{i}")
        paths.append(save_figure(fig, out_dir / f"{prefix}_{i}.png", metadata=metadata))
    for path, drawn_from in earlier.items():
        if path not in paths and drawn_from is not None and drawn_from == source:
            path.unlink(missing_ok=True)
    return paths


def main(argv: Sequence[str] | None = None) -> list[Path]:
    p = argparse.ArgumentParser(
        prog="python -m sweeps.heatmaps",
        description="Attention heatmaps (PNG) of a checkpoint or an untrained model.",
    )
    p.add_argument(
        "checkpoint",
        nargs="?",
        type=Path,
        help="a Seq2SeqModule .ckpt, a trial's checkpoint folder, or a trial's folder (its last checkpoint)",
    )
    p.add_argument(
        "--attention", help="no checkpoint: build an untrained model with this mechanism"
    )
    p.add_argument("--K", type=int, help="memory vectors (with --attention memory)")
    p.add_argument("--preset", help="model size for --attention (default tiny)")
    p.add_argument("--output", type=output_folder, required=True, help="folder for the PNGs")
    p.add_argument("--n", type=positive_int, default=4, help="sentences to draw (default 4)")
    p.add_argument(
        "--vocab-size",
        type=positive_int,
        help="copy-task symbols (default: the checkpoint's data settings, else its model's "
        "vocabulary, or 20)",
    )
    p.add_argument(
        "--max-length",
        type=positive_int,
        help="copy-task longest sequence (default: the checkpoint's data settings, else its "
        "max_source_len - 1, or 10)",
    )
    p.add_argument(
        "--min-length",
        type=nonnegative_int,
        help="copy-task shortest sequence (default: the checkpoint's data settings, else 1)",
    )
    p.add_argument(
        "--data-seed",
        type=nonnegative_int,
        help="seed of the validation sentences (default: the trial's, from the checkpoint's data "
        "settings, else 0); another seed draws other sentences than the trial validated on",
    )
    p.add_argument("--seed", type=int, default=0, help="weights seed for --attention (default 0)")
    args = p.parse_args(argv)
    if args.checkpoint is None and args.attention is None:
        p.error("give a checkpoint (a .ckpt, or a trial's folder) or --attention NAME")
    if args.checkpoint is not None and args.attention is not None:
        p.error("give a checkpoint or --attention NAME, not both: a checkpoint brings its own")
    if args.checkpoint is not None and (given := [o for o in ("K", "preset") if getattr(args, o)]):
        flags = " and ".join(f"--{o}" for o in given)
        p.error(f"{flags}: for --attention; a checkpoint brings its own (drop {flags})")
    args.preset = args.preset or "tiny"
    if None not in (args.min_length, args.max_length) and args.min_length > args.max_length:
        p.error(f"--min-length {args.min_length} is above --max-length {args.max_length}")
    if args.attention is not None:
        try:
            options = attention_options(args.attention)
        except (ValueError, KeyError) as exc:
            p.error(str(exc).strip("'\""))
        if args.K is not None and "K" not in options:
            p.error(
                f"--K is memory attention's; --attention {args.attention} takes none (drop --K)"
            )
    saved: dict[str, Any] = {}
    if args.checkpoint is not None:
        # a .ckpt file, or a trial's checkpoint folder holding one (as the timing command takes)
        try:
            args.checkpoint = command_checkpoint(args.checkpoint)
            # the trial's data settings, as trainer.fit(model, datamodule=dm) stored them; a
            # checkpoint without the module's settings is said here, before it is loaded
            saved = read_settings(args.checkpoint)[1]
        except TimingError as exc:
            p.error(str(exc))
        print(f"checkpoint {args.checkpoint}", flush=True)
    try:
        module = load_module(args)
    except (ValueError, KeyError) as exc:
        # an unknown mechanism, preset or K, or a file that is no checkpoint (a CheckpointError,
        # one line naming what it is): its own words
        p.error(str(exc).strip("'\""))
    except (EOFError, pickle.UnpicklingError, RuntimeError) as exc:
        p.error(f"{args.checkpoint}: not a checkpoint torch can read ({type(exc).__name__})")
    hp = module.hparams  # the copy task's symbols: what the model embeds and emits
    known = min(int(hp.src_vocab_size), int(hp.tgt_vocab_size)) - FIRST_SYMBOL
    if args.vocab_size is not None and args.vocab_size > known:
        # a copy task with more symbols than the model embeds: an IndexError deep in torch
        p.error(
            f"--vocab-size {args.vocab_size}: the checkpoint's model knows {known} symbols; "
            f"drop --vocab-size or give at most {known}"
        )
    if problem := copy_task_settings(saved):
        p.error(f"{args.checkpoint}: {problem}")
    try:
        dm = build_datamodule(module, args, saved)
    except ValueError as exc:  # an option against a stored setting: --min-length above its longest
        p.error(f"{exc} (the copy task asked for: {data_settings(module, args, saved)})")
    batch = next(iter(dm.val_dataloader()))
    settings = ", ".join(f"{k}={getattr(dm.hparams, k)}" for k in VALIDATION_SETTINGS)
    changed = [  # an option repeating the stored setting changes nothing
        f"--{o.replace('_', '-')}"
        for k, o in OVERRIDES.items()
        if getattr(args, o) is not None and getattr(args, o) != saved.get(k)
    ]
    whose = (
        "a new draw of the copy task's"
        if not saved
        else f"the trial's copy task, with {' '.join(changed)} given, so not the trial's"
        if changed
        else "the trial's"
    )
    print(
        f"sentences: the first {min(args.n, len(dm.datasets['val']))} of {whose} validation "
        f"set ({settings})",
        flush=True,
    )
    name = module.hparams.attention
    kwargs = module.hparams.attention_kwargs or {}
    prefix = name + (f"_K{kwargs['K']}" if "K" in kwargs else "")
    if args.checkpoint is not None:
        source = str(args.checkpoint.resolve())
    else:
        source = (
            f"an untrained model (--attention {name} --preset {args.preset} --seed {args.seed})"
        )
    if problem := other_source(args.output, prefix, source):
        p.error(problem)
    paths = write_heatmaps(module, batch, args.output, args.n, prefix, source)
    for path in paths:
        print(path)
    return paths


if __name__ == "__main__":
    main()
