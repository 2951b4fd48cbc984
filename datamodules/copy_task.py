"""The copy task: the target is the source. Generated in memory from a seed, no disk needed.

    dm = CopyTaskDataModule(vocab_size=20, max_length=10)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))   # dict per docs/CONTRACTS.md

Symbols are the ids ``4 .. vocab_size + 3`` (0-3 are pad/bos/eos/unk). Each split is generated from
its own seed derived from ``seed`` (``numpy.random.SeedSequence(seed).spawn(3)``), as one flat
token array plus offsets, so 100k examples take milliseconds. Every batch carries its sequences'
positions in the split (``indices``, docs/CONTRACTS.md).

Training and validation lengths are uniform in ``[min_length, max_length]`` (an empty sequence
becomes just EOS). The two are drawn independently, so validation is not held out from training:
short sequences, of which few distinct ones exist, occur in both. At the defaults (vocab_size=20,
lengths 0..10, train_size=100,000, seed 0) 339 of the 1,000 validation sequences also occur in
training, all of them of length 0 to 4; at max_length=20, 158; at max_length=50, 60; at
max_length=200, 15.

The test split is held out: a test sequence that also occurs in the training or validation split is
replaced by a fresh draw from the test split's own generator
(:meth:`CopyTaskDataModule.held_out_test`), so a test BLEU measures copying unseen sequences. The
redraws change its lengths: the short sequences are the ones that collide, so the held-out split's
lengths are not uniform but lean long. At the defaults 299 of its 1,000 sequences are drawn again;
it then holds no sequence of length 0, 1 or 2 (79, 89 and 68 before) and 43 of length 3 (87 before),
and its mean length is 6.91 against 5.24 before; at max_length=20, 155 are drawn again and the mean
length is 12.06 against 10.48. Validation and test BLEU are thus measured on different mixes of
lengths. (The generation is kept as it is: the published figures were computed on these splits.)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Annotated

import lightning.pytorch as pl
import numpy as np
import torch
from annotated_types import Ge
from torch.utils.data import DataLoader, Dataset

from .checkpoint_files import LoadsCheckpointFiles
from .ranges import check_ranges
from .resumable import EpochHook, EpochRandomSampler, ResumableDataLoader
from .vocab import BOS_ID, EOS_ID, FIRST_SYMBOL, PAD_ID, UNK_ID, ids_to_text

SPLITS = ("train", "val", "test")


class SmallTestSplitWarning(UserWarning):
    """The copy task's held-out test split came out smaller than ``test_size``
    (:meth:`CopyTaskDataModule.held_out_test`)."""


class CopyDataset(Dataset):
    """Sequences stored as one flat int64 array and offsets; item i is ``tokens[offsets[i]:offsets[i+1]]``."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        self.tokens = tokens
        self.offsets = offsets

    @classmethod
    def generate(
        cls, size: int, vocab_size: int, min_length: int, max_length: int, rng: np.random.Generator
    ) -> CopyDataset:
        lengths = rng.integers(min_length, max_length + 1, size=size)  # (N,)
        offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = rng.integers(
            FIRST_SYMBOL, FIRST_SYMBOL + vocab_size, size=int(offsets[-1]), dtype=np.int64
        )
        return cls(tokens, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def join(cls, sequences: Sequence[np.ndarray]) -> CopyDataset:
        lengths = np.array([len(q) for q in sequences], dtype=np.int64)
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate(list(sequences)) if sequences else np.zeros(0, dtype=np.int64)
        return cls(tokens.astype(np.int64), offsets)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


class NumberedCopyDataset(Dataset):
    """What the loaders serve: item i of a :class:`CopyDataset` as ``(i, sequence)``, so that
    :func:`collate_numbered` gives each batch its sequences' positions in the split (``indices``)."""

    def __init__(self, data: CopyDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[int, np.ndarray]:
        return index, self.data[index]


def collate_copy(
    examples: Sequence[np.ndarray], indices: Sequence[int] | None = None
) -> dict[str, torch.Tensor]:
    """Pad a list of symbol sequences into a batch dict: src == tgt == symbols + EOS, right-padded;
    with ``indices`` (each sequence's position in its split) the batch's ``indices`` too."""
    lengths = torch.tensor([len(x) + 1 for x in examples], dtype=torch.long)  # (B,) incl. EOS
    width = int(lengths.max()) if len(examples) else 1
    src = torch.full((len(examples), width), PAD_ID, dtype=torch.long)  # (B, S)
    for row, seq in enumerate(examples):
        src[row, : len(seq)] = torch.from_numpy(np.ascontiguousarray(seq))
        src[row, len(seq)] = EOS_ID
    batch = {"src": src, "src_lengths": lengths, "tgt": src.clone(), "tgt_lengths": lengths.clone()}
    if indices is not None:
        batch["indices"] = torch.tensor(list(indices), dtype=torch.long)  # (B,)
    return batch


def collate_numbered(items: Sequence[tuple[int, np.ndarray]]) -> dict[str, torch.Tensor]:
    """:func:`collate_copy` of :class:`NumberedCopyDataset` items: the batch dict with ``indices``."""
    return collate_copy([seq for _, seq in items], [index for index, _ in items])


class LengthBucketBatchSampler:
    """Training batches of similar lengths, their order a function of ``(seed, epoch)`` alone.

    Each epoch: a permutation of the examples drawn from ``(seed, epoch)``, cut into pools of
    ``pool_batches`` batches; each pool sorted by length (stably) and cut into batches; all the
    epoch's batches then shuffled with the same generator. Every example is seen once per epoch, as
    with the plain shuffled sampler, but a batch pads to about its own length rather than to the
    longest of ``batch_size`` random lengths (~L): on the copy task at L=40 a training step took
    0.63x the time (memory attention) and 0.47x (Bahdanau). A batch sampler with ``epoch`` and
    ``set_epoch``, so :class:`~datamodules.resumable.ResumableDataLoader` resumes it exactly; its
    ``sampler`` attribute (:class:`~datamodules.resumable.EpochHook`) is where Lightning's
    per-epoch ``set_epoch`` reaches it.
    """

    def __init__(
        self, lengths: np.ndarray, batch_size: int, seed: int = 0, pool_batches: int = 100
    ) -> None:
        self.lengths = np.asarray(lengths)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.pool = self.batch_size * int(pool_batches)
        self.epoch = 0
        self.sampler = EpochHook(self)  # where Lightning's per-epoch set_epoch call arrives

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def batches(self) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch, 1])
        perm = rng.permutation(len(self.lengths))
        out: list[list[int]] = []
        for start in range(0, len(perm), self.pool):
            pool = perm[start : start + self.pool]
            pool = pool[np.argsort(self.lengths[pool], kind="stable")]
            out += [
                pool[i : i + self.batch_size].tolist() for i in range(0, len(pool), self.batch_size)
            ]
        return [out[i] for i in rng.permutation(len(out))]

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches()

    def __len__(self) -> int:
        full, rest = divmod(len(self.lengths), self.pool)
        return full * (self.pool // self.batch_size) + -(-rest // self.batch_size)


class CopyTaskDataModule(LoadsCheckpointFiles, pl.LightningDataModule):
    """Random symbol sequences to copy.

    Args:
        vocab_size: number of distinct symbols (ids 4 .. vocab_size + 3).
        max_length, min_length: sequence lengths (without EOS), uniform in [min_length, max_length]
            in train and validation; the held-out test split has fewer short ones (module docstring).
        train_size, val_size, test_size: examples per split.
        batch_size: examples per batch.
        seed: generation seed; the splits use distinct seeds derived from it.
        num_workers: DataLoader workers.
        bucket_batches: training batches of similar lengths (:class:`LengthBucketBatchSampler`)
            instead of random ones padded to their longest: less padding computed; single-process
            training only (under DDP the shuffled sampler is kept). Faster per step, but the copy
            task learns slower on them: L=40, memory K=16, 3,000 steps gave 78.9 BLEU bucketed
            against 94.9 with random batches (``sweeps/k_vs_length.yaml`` has the figures), so the
            shipped studies leave it off.
    """

    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __init__(
        self,
        vocab_size: Annotated[int, Ge(1)] = 20,
        max_length: Annotated[int, Ge(1)] = 10,
        min_length: Annotated[int, Ge(0)] = 0,
        train_size: Annotated[int, Ge(1)] = 100_000,
        val_size: Annotated[int, Ge(1)] = 1000,
        test_size: Annotated[int, Ge(0)] = 1000,
        batch_size: Annotated[int, Ge(1)] = 64,
        seed: Annotated[int, Ge(0)] = 0,
        num_workers: Annotated[int, Ge(0)] = 0,
        bucket_batches: bool = False,
    ) -> None:
        super().__init__()
        check_ranges(CopyTaskDataModule.__init__, locals())
        if min_length > max_length:
            raise ValueError(
                f"need 0 <= min_length <= max_length, got min_length={min_length}, max_length={max_length}"
            )
        self.save_hyperparameters()
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.min_length = min_length
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.batch_size = batch_size
        self.seed = seed
        self.num_workers = num_workers
        self.bucket_batches = bucket_batches
        self.src_vocab_size = vocab_size + FIRST_SYMBOL
        self.tgt_vocab_size = vocab_size + FIRST_SYMBOL
        self.max_source_len = max_length + 1
        self.datasets: dict[str, CopyDataset] = {}
        self._test_rng: np.random.Generator | None = None
        #: test sequences that were also in train or validation and were drawn again
        self.test_redrawn = 0

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        seeds = np.random.SeedSequence(self.seed).spawn(len(SPLITS))
        for split, seed_seq in zip(SPLITS, seeds):
            rng = np.random.default_rng(seed_seq)
            self.datasets[split] = CopyDataset.generate(
                self.sizes[split], self.vocab_size, self.min_length, self.max_length, rng
            )
        self._test_rng = rng  # the test split's generator (the last spawned), for redraws

    def held_out_test(self, max_rounds: int = 20) -> CopyDataset:
        """The test split with no sequence that occurs in train or validation: each such sequence
        is replaced by a new draw from the test split's own generator, up to ``max_rounds`` times.
        Done once, when the test split is first asked for; :attr:`test_redrawn` counts the draws.

        Where few distinct sequences exist (a small ``vocab_size`` and ``max_length`` against a
        large ``train_size``) the split comes out smaller than ``test_size``: a
        :class:`SmallTestSplitWarning` says how many it holds and why; an empty one (with
        ``test_size`` above 0) raises ValueError."""
        if not self.datasets:
            self.setup()
        if self._test_rng is None:  # already held out
            return self.datasets["test"]
        seen = {
            self.datasets[s][i].tobytes()
            for s in ("train", "val")
            for i in range(len(self.datasets[s]))
        }
        kept = [
            q
            for q in (self.datasets["test"][i] for i in range(len(self.datasets["test"])))
            if q.tobytes() not in seen
        ]
        missing = len(self.datasets["test"]) - len(kept)
        self.test_redrawn = missing
        for _ in range(max_rounds):
            if missing == 0:
                break
            fresh = CopyDataset.generate(
                missing, self.vocab_size, self.min_length, self.max_length, self._test_rng
            )
            new = [fresh[i] for i in range(len(fresh)) if fresh[i].tobytes() not in seen]
            kept += new
            missing -= len(new)
        asked = self.sizes["test"]
        if len(kept) < asked:
            why = self._why_few_unseen(len(seen), max_rounds)
            if not kept:
                raise ValueError(
                    f"CopyTaskDataModule: the held-out test split is empty (test_size={asked}): "
                    f"{why}. Raise vocab_size or max_length, or lower train_size, so that unseen "
                    "sequences remain; or pass test_size=0 to skip testing"
                )
            warnings.warn(
                f"CopyTaskDataModule: the held-out test split has {len(kept)} sequences, not "
                f"test_size={asked}: {why}. Raise vocab_size or max_length, or lower train_size, "
                "for a full test split",
                SmallTestSplitWarning,
                stacklevel=2,
            )
        self.datasets["test"] = CopyDataset.join(kept)
        self._test_rng = None
        return self.datasets["test"]

    def _why_few_unseen(self, seen: int, max_rounds: int) -> str:
        """Why the test draws found few sequences outside train and validation (``seen``: the
        distinct sequences those two hold)."""
        lengths = range(self.min_length, self.max_length + 1)
        total = sum(self.vocab_size**n for n in lengths)
        count = f"{total:.3g}" if total > 10**9 else str(total)
        return (
            f"a test sequence that also occurs in train or validation is drawn again (up to "
            f"{max_rounds} times), and of the {count} distinct sequences of lengths "
            f"{self.min_length}..{self.max_length} over vocab_size={self.vocab_size} symbols, "
            f"train and validation (train_size={self.sizes['train']}, "
            f"val_size={self.sizes['val']}) hold {seen}"
        )

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if not self.datasets:
            self.setup()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        # batches carry each sequence's position in the split (``indices``): under DDP the
        # samplers repeat some sequences, and the module counts each index once in BLEU
        dataset = NumberedCopyDataset(self.datasets[split])
        if (
            shuffle and self.bucket_batches and not distributed
        ):  # batches of similar lengths, (seed, epoch)
            return ResumableDataLoader(
                dataset,
                batch_sampler=LengthBucketBatchSampler(
                    self.datasets[split].lengths(), self.batch_size, seed=self.seed
                ),
                generator=torch.Generator().manual_seed(self.seed),
                collate_fn=collate_numbered,
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
            )
        if (
            shuffle
        ):  # order a function of (seed, epoch), position saved in checkpoints: exact resume
            return ResumableDataLoader(
                dataset,
                batch_size=self.batch_size,
                sampler=EpochRandomSampler(dataset, seed=self.seed),
                generator=torch.Generator().manual_seed(self.seed),
                collate_fn=collate_numbered,
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
            )
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=False,
            # each iterator draws its workers' base seed from here, not from the global RNG that
            # dropout draws from: the validation loader's (made at the sanity check in a fit from
            # scratch, at the first validation in a resumed fit, or at each validation without
            # workers) moved dropout's stream, and a resume with workers was not exact
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=collate_numbered,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled per epoch from ``(seed, epoch)``; a :class:`~datamodules.resumable.ResumableDataLoader`."""
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """The held-out test split (:meth:`held_out_test`): no sequence of train or validation."""
        self.held_out_test()
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        """What ``trainer.predict`` decodes: the held-out test split, as :meth:`test_dataloader`."""
        return self.test_dataloader()

    def ids_to_text(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Space-joined ids up to the first EOS, padding and BOS dropped: ``[7, 12, 5, 2, 0] ->
        "7 12 5"``; an unknown token the model emitted stays, as ``3`` (:data:`~datamodules.vocab.DROPPED_IDS`)."""
        return ids_to_text(ids)
