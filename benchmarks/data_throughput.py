"""Throughput of the WMT'17 data path, in sentences per second, to size the 52M-pair en-cs run.

Run it (CPU only; about 20 s on the 10k sample):

    .venv/bin/python benchmarks/data_throughput.py
    .venv/bin/python benchmarks/data_throughput.py --data DIR --vocab 16000 --threads 4 --scale 2000000

``--data`` is a folder with ``train.{en,de}`` (default: ``$MEMATTN_SHARED_DATA/wmt-ende-sample``, else
``shared/data/wmt-ende-sample`` beside the repository, when present, else the repository slice
tests/data/wmt-ende-tiny). Stages, each timed on its own:

* bpe_train     sentencepiece BPE training on both sides of the training split (sentences = lines
                of both sides; on a big corpus only ``bpe_sample_sentences`` lines are used, so this
                cost is capped rather than linear)
* encode        ``sp.encode`` of in-memory lines (both sides)
* encode+cache  streaming a text file through the encoder into the binary cache (both sides)
* load+filter   opening the caches and length-filtering (pairs)
* batching      one epoch of the token-budget batch sampler (pairs); ``--scale N`` repeats it on N
                pairs resampled from the real length distribution, since its cost is O(N log N)
* loader        one epoch through the DataLoader with padding/collation (pairs)
* copy_generate generating the copy task's 100,000 training examples of length <= 50 in memory
                (``CopyTaskDataModule.setup``; was a 2 s wall-clock assert in the tests)

Last, the time each stage would take for 52M pairs at the measured rate.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import nonnegative_int, positive_int  # noqa: E402

from datamodules.bpe import ensure_bpe_model, ensure_encoded, load_sentencepiece, read_lines  # noqa: E402
from datamodules.bucketing import TokenBucketBatchSampler  # noqa: E402

SHARED = (  # MEMATTN_SHARED_DATA, else the `shared/` folder beside the repository
    Path(
        os.environ.get("MEMATTN_SHARED_DATA")
        or Path(__file__).resolve().parents[2] / "shared" / "data"
    )
    / "wmt-ende-sample"
)
SLICE = Path(__file__).resolve().parents[1] / "tests" / "data" / "wmt-ende-tiny"
EN_CS_PAIRS = 52_000_000


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--data",
        default=str(SHARED if SHARED.is_dir() else SLICE),
        help="a folder with train.SRC and train.TGT, one sentence a line",
    )
    ap.add_argument("--src", default="en")
    ap.add_argument("--tgt", default="de")
    ap.add_argument("--vocab", type=positive_int, default=8000)
    ap.add_argument(
        "--max-length",
        type=positive_int,
        default=80,
        help="drop pairs longer than this (WMT17DataModule max_length)",
    )
    ap.add_argument("--batch-tokens", type=positive_int, default=4096)
    ap.add_argument("--threads", type=positive_int, default=min(os.cpu_count() or 1, 16))
    ap.add_argument(
        "--scale",
        type=nonnegative_int,
        default=1_000_000,
        help="also time the batch sampler on this many resampled pairs (0: skip)",
    )
    args = ap.parse_args(argv)
    data = Path(args.data)
    wanted = [f"train.{lang}" for lang in (args.src, args.tgt)]
    missing = [name for name in wanted if not (data / name).is_file()]
    if missing:  # checked before the BPE training reads them
        problem = (
            f"no {' or '.join(missing)} in it"
            if data.is_dir()
            else ("not a folder" if data.exists() else "no such folder")
        )
        ap.error(
            f"--data {data}: {problem}; the folder must hold {' and '.join(wanted)} (the "
            "training split of --src and --tgt, one sentence a line)"
        )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)

    import torch
    from torch.utils.data import DataLoader

    from datamodules.bucketing import ParallelTokenDataset, collate_pairs

    torch.set_num_threads(1)
    data = Path(args.data)
    files = [str(data / f"train.{lang}") for lang in (args.src, args.tgt)]
    n_pairs = len(read_lines(files[0]))
    rows: list[tuple[str, int, float]] = []
    print(f"data {data}: {n_pairs} pairs, vocab {args.vocab}, {args.threads} encoder threads")

    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        model, _ = ensure_bpe_model(files, cache, args.vocab, num_threads=args.threads)
        rows.append(("bpe_train", 2 * n_pairs, time.perf_counter() - t0))

        sp = load_sentencepiece(model)
        lines = read_lines(files[0]) + read_lines(files[1])
        t0 = time.perf_counter()
        sp.encode(lines, out_type=int, num_threads=args.threads)
        rows.append(("encode", len(lines), time.perf_counter() - t0))

        t0 = time.perf_counter()
        corpora = [ensure_encoded(f, model, cache, num_threads=args.threads)[0] for f in files]
        rows.append(("encode+cache", 2 * n_pairs, time.perf_counter() - t0))

        t0 = time.perf_counter()
        src, tgt = (ensure_encoded(f, model, cache)[0] for f in files)  # cache hits
        ls, lt = src.lengths(), tgt.lengths()
        keep = np.flatnonzero(
            (ls > 0) & (lt > 0) & (ls <= args.max_length) & (lt <= args.max_length)
        )
        ds = ParallelTokenDataset(src, tgt, keep)
        rows.append(("load+filter", n_pairs, time.perf_counter() - t0))

        sampler = TokenBucketBatchSampler(
            ds.src_lengths, ds.tgt_lengths, batch_tokens=args.batch_tokens
        )
        t0 = time.perf_counter()
        n_batches = len(sampler.all_batches(0))
        rows.append(("batching", len(ds), time.perf_counter() - t0))

        if args.scale:
            pick = np.random.default_rng(0).integers(0, len(ds), args.scale)
            big = TokenBucketBatchSampler(
                ds.src_lengths[pick], ds.tgt_lengths[pick], batch_tokens=args.batch_tokens
            )
            t0 = time.perf_counter()
            big.all_batches(0)
            rows.append((f"batching@{args.scale}", args.scale, time.perf_counter() - t0))

        loader = DataLoader(ds, batch_sampler=sampler, collate_fn=collate_pairs)
        t0 = time.perf_counter()
        padded = sum(b["src"].numel() for b in loader)
        rows.append(("loader", len(ds), time.perf_counter() - t0))
        del corpora

    from datamodules.copy_task import CopyTaskDataModule

    copy_dm = CopyTaskDataModule(train_size=100_000, max_length=50)
    t0 = time.perf_counter()
    copy_dm.setup("fit")
    rows.append(("copy_generate", len(copy_dm.datasets["train"]), time.perf_counter() - t0))

    real = int((ds.src_lengths).sum())
    print(
        f"kept {len(ds)} of {n_pairs} pairs (max_length {args.max_length}); {n_batches} batches of "
        f"<= {args.batch_tokens} tokens; source padding efficiency {real / padded:.1%}"
    )
    print(f"{'stage':<20}{'sentences':>12}{'seconds':>10}{'sentences/s':>14}{'52M pairs':>12}")
    for name, n, secs in rows:
        rate = n / max(secs, 1e-9)
        if name == "copy_generate":
            print(f"{name:<20}{n:>12}{secs:>10.3f}{rate:>14,.0f}{'-':>12}")
            continue
        sides = 2 if name in ("bpe_train", "encode", "encode+cache") else 1  # lines per pair
        todo = EN_CS_PAIRS * sides if name != "bpe_train" else min(2 * EN_CS_PAIRS, 2_000_000)
        est = todo / rate  # BPE training sees at most bpe_sample_sentences (2M) lines
        print(f"{name:<20}{n:>12}{secs:>10.3f}{rate:>14,.0f}{_fmt(est):>12}")
    print(
        "(52M column: that stage alone at the measured rate, linear extrapolation; bpe_train "
        "for the 2M lines bpe_sample_sentences lets it read, a lower bound)"
    )


def _fmt(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    main()
