"""Exact resume: a training run stopped at any checkpoint and resumed ends bit for bit where an
uninterrupted run with the same seed ends (same machine).

Two pieces, both saved in the ordinary Lightning checkpoint:

- :class:`ResumableDataLoader` -- a ``DataLoader`` with ``state_dict``/``load_state_dict``, which
  Lightning's fit loop saves under ``loops.fit_loop.state_dict.combined_loader`` and gives back
  before it creates the resumed run's first iterator. The state is the sampler's epoch and the
  batches of that epoch already trained on; the resumed iterator skips them at the index level
  (no example is loaded or collated for nothing). The batch order must be a function of
  ``(seed, epoch)``: :class:`EpochRandomSampler` for plain shuffled data, or a batch sampler with
  ``epoch``/``set_epoch`` such as :class:`~datamodules.bucketing.TokenBucketBatchSampler`.
- :class:`RngStateCallback` -- the global RNG states (torch CPU and CUDA, numpy, python
  ``random``: dropout and noise draw from them) as the callback's checkpoint state, put back at
  ``on_train_start``, just before the resumed run's first training step.

    trainer = pl.Trainer(callbacks=[RngStateCallback()], ...)
    trainer.fit(module, datamodule=dm, ckpt_path=path)   # dm's train loader a ResumableDataLoader
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler


class EpochRandomSampler(RandomSampler):
    """A permutation of ``range(n)`` drawn from ``(seed, epoch)`` alone, so epoch e's order is the
    same whether or not the run stopped before it. Lightning calls ``set_epoch`` every epoch.
    A ``RandomSampler`` subclass so that Lightning, under DDP, sees the loader as shuffled and
    swaps in a (seed, epoch)-shuffled ``DistributedSampler``."""

    def __init__(self, data_source, seed: int = 0) -> None:
        super().__init__(data_source)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        yield from (
            np.random.default_rng([self.seed, self.epoch])
            .permutation(len(self.data_source))
            .tolist()
        )

    def __len__(self) -> int:
        return len(self.data_source)


class _SkipFirst:
    """The loader's batch-index iterable with its first ``skip`` batches dropped."""

    def __init__(self, batches, skip: int) -> None:
        self.batches = batches
        self.skip = skip

    def __iter__(self) -> Iterator[list[int]]:
        for i, batch in enumerate(self.batches):
            if i >= self.skip:
                yield batch

    def __len__(self) -> int:
        return max(0, len(self.batches) - self.skip)


def _epoch_holders(loader: DataLoader) -> list[Any]:
    """The objects whose ``epoch`` decides the order: the sampler, the batch sampler and its
    ``sampler`` (whichever have ``set_epoch``), as Lightning's ``_set_sampler_epoch`` finds them."""
    found: dict[int, Any] = {}
    batch_sampler = getattr(loader, "batch_sampler", None)
    for obj in (
        getattr(loader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
    ):
        if obj is not None and callable(getattr(obj, "set_epoch", None)):
            found[id(obj)] = obj
    return list(found.values())


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` whose position within the epoch survives a checkpoint.

    Lightning's fit loop reads ``state_dict()`` when it saves a checkpoint: the epoch and the
    batches yielded in it. Lightning's data fetcher draws no batch ahead from a loader with a
    length (it knows which batch is the last), so those are the batches trained on.
    ``load_state_dict`` sets the samplers' epoch and makes the next iterator skip those batches;
    a finished epoch resumes at the start of the next one.

    Give it a ``generator``: the iterator's base seed (for worker seeding) is then drawn from it,
    re-seeded per epoch, instead of from the global torch RNG that dropout uses.
    """

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": getattr(self, "_iter_epoch", self._sampler_epoch()),
            "batches": getattr(self, "_yielded", 0),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        epoch, skip = int(state["epoch"]), int(state["batches"])
        if skip >= len(self):  # the epoch was finished: the next one starts from its first batch
            epoch, skip = epoch + 1, 0
        for holder in _epoch_holders(self):
            holder.set_epoch(epoch)
        self._pending_skip = skip

    def _sampler_epoch(self) -> int:
        epochs = [int(h.epoch) for h in _epoch_holders(self) if hasattr(h, "epoch")]
        return epochs[0] if epochs else 0

    @property
    def _index_sampler(self):
        base = super()._index_sampler
        skip = getattr(self, "_skip_now", 0)
        return _SkipFirst(base, skip) if skip else base

    def __iter__(self):
        epoch = self._sampler_epoch()
        skip = getattr(self, "_pending_skip", 0)
        self._pending_skip = 0
        if self.generator is not None:
            if not hasattr(self, "_generator_seed"):
                self._generator_seed = self.generator.initial_seed()
            seed = np.random.SeedSequence([self._generator_seed, epoch]).generate_state(
                1, np.uint64
            )[0]
            self.generator.manual_seed(int(seed) & (2**63 - 1))
        self._skip_now = skip
        try:
            iterator = super().__iter__()  # builds its index iterator from _index_sampler now
        finally:
            self._skip_now = 0
        self._iter_epoch, self._yielded = epoch, skip
        return self._counted(iterator)

    def _counted(self, iterator):
        for batch in iterator:
            self._yielded += 1
            yield batch


def _rng_states() -> dict[str, Any]:
    """The global RNG states as tensors and plain Python values (loadable with ``weights_only``)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_states(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["gauss"],
        )
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


class RngStateCallback(pl.Callback):
    """Saves the global RNG states with every checkpoint and restores them when a fit resumes.

    The states are read when the checkpoint is written (``state_dict``); in the uninterrupted run
    nothing draws from them between that moment (the end of a validation) and the next training
    step. Lightning hands them back (``load_state_dict``) while it restores the checkpoint, before
    the data and sanity-check setup; they are put back at ``on_train_start``, the last hook before
    the first resumed training step.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return _rng_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            _set_rng_states(self._pending)
            self._pending = None
