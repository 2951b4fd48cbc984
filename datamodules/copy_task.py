"""The copy task: the target is the source. Generated in memory from a seed, no disk needed.

    dm = CopyTaskDataModule(vocab_size=20, max_length=10)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))   # dict per docs/CONTRACTS.md

Symbols are the ids ``4 .. vocab_size + 3`` (0-3 are pad/bos/eos/unk); sequence lengths are uniform
in ``[min_length, max_length]`` (an empty sequence becomes just EOS). Each split is generated from
its own seed derived from ``seed`` (``numpy.random.SeedSequence(seed).spawn(3)``), as one flat
token array plus offsets, so 100k examples take milliseconds. The test split is held out: a test
sequence that also occurs in the training or validation split is replaced by a fresh draw from the
test split's own generator (:meth:`CopyTaskDataModule.held_out_test`; short sequences over a small
vocabulary collide often), so a test BLEU measures copying unseen sequences.
"""

from __future__ import annotations

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


def collate_copy(examples: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
    """Pad a list of symbol sequences into a batch dict: src == tgt == symbols + EOS, right-padded."""
    lengths = torch.tensor([len(x) + 1 for x in examples], dtype=torch.long)  # (B,) incl. EOS
    width = int(lengths.max()) if len(examples) else 1
    src = torch.full((len(examples), width), PAD_ID, dtype=torch.long)  # (B, S)
    for row, seq in enumerate(examples):
        src[row, : len(seq)] = torch.from_numpy(np.ascontiguousarray(seq))
        src[row, len(seq)] = EOS_ID
    return {"src": src, "src_lengths": lengths, "tgt": src.clone(), "tgt_lengths": lengths.clone()}


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
        max_length, min_length: sequence lengths (without EOS), uniform in [min_length, max_length].
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
        is replaced by a new draw from the test split's own generator, up to ``max_rounds`` times
        (where few distinct sequences exist, e.g. ``max_length=1``, the split comes out smaller).
        Done once, when the test split is first asked for; :attr:`test_redrawn` counts the draws."""
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
        self.datasets["test"] = CopyDataset.join(kept)
        self._test_rng = None
        return self.datasets["test"]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if not self.datasets:
            self.setup()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if (
            shuffle and self.bucket_batches and not distributed
        ):  # batches of similar lengths, (seed, epoch)
            dataset = self.datasets[split]
            return ResumableDataLoader(
                dataset,
                batch_sampler=LengthBucketBatchSampler(
                    dataset.lengths(), self.batch_size, seed=self.seed
                ),
                generator=torch.Generator().manual_seed(self.seed),
                collate_fn=collate_copy,
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
            )
        if (
            shuffle
        ):  # order a function of (seed, epoch), position saved in checkpoints: exact resume
            dataset = self.datasets[split]
            return ResumableDataLoader(
                dataset,
                batch_size=self.batch_size,
                sampler=EpochRandomSampler(dataset, seed=self.seed),
                generator=torch.Generator().manual_seed(self.seed),
                collate_fn=collate_copy,
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
            )
        return DataLoader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=False,
            # each iterator draws its workers' base seed from here, not from the global RNG that
            # dropout draws from: the validation loader's (made at the sanity check in a fit from
            # scratch, at the first validation in a resumed fit, or at each validation without
            # workers) moved dropout's stream, and a resume with workers was not exact
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=collate_copy,
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
        """Space-joined symbol ids up to the first EOS, specials dropped: ``[7, 12, 5, 2, 0] -> "7 12 5"``."""
        return ids_to_text(ids)
