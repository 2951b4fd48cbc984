"""Length-bucketed, token-budgeted, DDP-sharded batches over a pair of token caches.

Use the sampler as a DataLoader ``batch_sampler`` and keep Lightning from swapping it:
``Trainer(use_distributed_sampler=False)``. The sampler shards by itself (rank/world size taken
from ``torch.distributed`` when initialised, or given explicitly), and Lightning's per-epoch
``set_epoch`` call reaches it through its ``sampler`` attribute.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from .bpe import TokenizedCorpus
from .resumable import EpochHook
from .vocab import EOS_ID, PAD_ID


class ParallelTokenDataset(Dataset):
    """Kept lines of two aligned :class:`TokenizedCorpus` (item j is original line ``keep[j]``).

    Args:
        src, tgt: encoded source and target files (same number of lines).
        keep: int64 (N,) original line numbers of the pairs to serve.
        references: tokenized reference text for every original line (eval splits), or None.
    """

    def __init__(
        self,
        src: TokenizedCorpus,
        tgt: TokenizedCorpus,
        keep: np.ndarray,
        references: Sequence[str] | None = None,
    ) -> None:
        self.src = src
        self.tgt = tgt
        # int32 halves the footprint at 52M pairs (and in spawned DataLoader workers)
        self.keep = np.asarray(keep, dtype=np.int64 if src.n_lines >= 2**31 else np.int32)  # (N,)
        self.references = references
        self.src_lengths = (src.lengths()[self.keep] + 1).astype(np.int32)  # (N,) incl. EOS
        self.tgt_lengths = (tgt.lengths()[self.keep] + 1).astype(np.int32)  # (N,) incl. EOS

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, j: int) -> tuple[np.ndarray, np.ndarray, int, str | None]:
        line = int(self.keep[j])
        ref = self.references[line] if self.references is not None else None
        return self.src[line], self.tgt[line], line, ref


def collate_pairs(
    items: list[tuple[np.ndarray, np.ndarray, int, str | None]],
    pad_id: int = PAD_ID,
    eos_id: int = EOS_ID,
) -> dict:
    """Pad a list of dataset items into the batch dict of docs/CONTRACTS.md.

    Returns:
        src LongTensor (B, S), src_lengths (B,), tgt LongTensor (B, T) (ids + EOS, no BOS),
        tgt_lengths (B,), indices LongTensor (B,) original line numbers, and references
        (list[str]) when the dataset has them.
    """
    b = len(items)
    src_len = torch.tensor([len(s) + 1 for s, _, _, _ in items], dtype=torch.long)  # (B,)
    tgt_len = torch.tensor([len(t) + 1 for _, t, _, _ in items], dtype=torch.long)  # (B,)
    src = torch.full((b, int(src_len.max())), pad_id, dtype=torch.long)  # (B, S)
    tgt = torch.full((b, int(tgt_len.max())), pad_id, dtype=torch.long)  # (B, T)
    for k, (s, t, _, _) in enumerate(items):
        src[k, : len(s)] = torch.from_numpy(s.astype(np.int64))
        src[k, len(s)] = eos_id
        tgt[k, : len(t)] = torch.from_numpy(t.astype(np.int64))
        tgt[k, len(t)] = eos_id
    batch = dict(
        src=src,
        src_lengths=src_len,
        tgt=tgt,
        tgt_lengths=tgt_len,
        indices=torch.tensor([i for _, _, i, _ in items], dtype=torch.long),
    )  # (B,)
    if items and items[0][3] is not None:
        batch["references"] = [r for _, _, _, r in items]
    return batch


class TokenBucketBatchSampler:
    """Yields lists of dataset positions; batches hold sentences of similar length.

    Sorting is by source then target length (ties broken by a ``seed``-drawn key when shuffling),
    then the sorted order is cut greedily so that ``max_len_in_batch * n_sentences <= batch_tokens``
    for source and for target separately (padded size), or into runs of ``batch_size``. A single
    sentence longer than the budget gets a batch of its own. The batches are built once (so their
    count, which Lightning reads once, never changes); with ``shuffle`` their order is permuted per
    epoch (``set_epoch``). Everything is a function of ``(seed, epoch)``, so all ranks agree. Rank r
    of W takes batches r, r+W, ...; the batch list is first padded by repeating its head so every
    rank gets the same count (the per-step collectives need it). Those repeated sentences are
    evaluated twice; the module keeps one sentence per batch ``indices`` entry
    (:func:`lightning_modules.module.first_per_index`), so its figures count each once.

    Args:
        src_lengths, tgt_lengths: int (N,) padded-size lengths (incl. EOS) of each pair.
        batch_tokens: token budget per side per batch; or
        batch_size: fixed number of pairs per batch (still length-bucketed).
        max_sentences: optional cap on pairs per batch with ``batch_tokens``.
        rank, world_size: shard; default from ``torch.distributed`` if initialised, else 0 / 1.
    """

    def __init__(
        self,
        src_lengths: np.ndarray,
        tgt_lengths: np.ndarray,
        batch_tokens: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        max_sentences: int | None = None,
    ) -> None:
        if (batch_tokens is None) == (batch_size is None):
            raise ValueError("give exactly one of batch_tokens and batch_size")
        if (
            batch_tokens is not None
            and batch_tokens < 1
            or batch_size is not None
            and batch_size < 1
        ):
            raise ValueError("batch_tokens / batch_size must be positive")
        self.src_lengths = np.asarray(src_lengths)  # (N,) int
        self.tgt_lengths = np.asarray(tgt_lengths)  # (N,) int
        if self.src_lengths.shape != self.tgt_lengths.shape:
            raise ValueError("src_lengths and tgt_lengths differ in size")
        if world_size is None or rank is None:
            dist_on = torch.distributed.is_available() and torch.distributed.is_initialized()
            world_size = (
                world_size
                if world_size is not None
                else (torch.distributed.get_world_size() if dist_on else 1)
            )
            rank = rank if rank is not None else (torch.distributed.get_rank() if dist_on else 0)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.batch_tokens = batch_tokens
        self.fixed_batch_size = batch_size  # not `batch_size`: Lightning would try to rebuild us
        self.max_sentences = max_sentences
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.sampler = EpochHook(self)
        self._batches: list[np.ndarray] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _composition(self) -> list[np.ndarray]:
        """The batches, shortest first; fixed for a given seed, so every epoch has the same count."""
        if self._batches is None:
            n = len(self.src_lengths)
            tie = np.random.default_rng(self.seed).random(n) if self.shuffle else np.arange(n)
            order = np.lexsort((tie, self.tgt_lengths, self.src_lengths))  # (N,) shortest first
            if self.fixed_batch_size is not None:
                bounds = list(range(0, n, self.fixed_batch_size)) + [n]
            else:
                bounds = _greedy_bounds(
                    self.src_lengths[order].tolist(),
                    self.tgt_lengths[order].tolist(),
                    self.batch_tokens,
                    self.max_sentences or n,
                )
            self._batches = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return self._batches

    def all_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """Every batch of the epoch before sharding (int64 arrays of positions)."""
        batches = self._composition()
        if not self.shuffle:
            return batches
        epoch = self.epoch if epoch is None else epoch
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(batches))
        return [batches[k] for k in perm]

    def rank_batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of the epoch (equal count on every rank)."""
        batches = self.all_batches(epoch)
        if self.world_size == 1 or not batches:
            return batches
        per_rank = math.ceil(len(batches) / self.world_size)
        padded = batches + [
            batches[k % len(batches)] for k in range(per_rank * self.world_size - len(batches))
        ]
        return padded[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.rank_batches():
            yield b.tolist()

    def __len__(self) -> int:
        return len(self.rank_batches())


def _greedy_bounds(src: list[int], tgt: list[int], budget: int, max_n: int) -> list[int]:
    """Cut points of a length-sorted sequence so each piece's padded size fits ``budget``."""
    bounds = [0]
    start, ms, mt = 0, 0, 0
    for pos in range(len(src)):
        a, b = src[pos], tgt[pos]
        ns = a if a > ms else ms
        nt = b if b > mt else mt
        count = pos - start + 1
        if count > 1 and (ns * count > budget or nt * count > budget or count > max_n):
            bounds.append(pos)
            start, ms, mt = pos, a, b
        else:
            ms, mt = ns, nt
    if len(src):
        bounds.append(len(src))
    return bounds
