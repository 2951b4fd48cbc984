"""Exact resume: a training run stopped at any checkpoint and resumed ends bit for bit where an
uninterrupted run with the same seed ends (same machine) -- a checkpoint written during ``fit``
(``ModelCheckpoint``, a callback's ``trainer.save_checkpoint``) or after it returned at
``max_steps`` (``trainer.save_checkpoint``).

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
  ``on_train_start``, just before the resumed run's first training step. There it also sets
  back Lightning's count of a finished epoch's batches, which a ``trainer.save_checkpoint``
  after a fit that stopped on an epoch's last batch keeps (the next epoch would end after one
  batch).

    trainer = pl.Trainer(callbacks=[RngStateCallback()], ...)
    trainer.fit(module, datamodule=dm, ckpt_path=path)   # dm's train loader a ResumableDataLoader
"""

from __future__ import annotations

import random
import weakref
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


class EpochHook:
    """What Lightning finds at ``batch_sampler.sampler``: forwards ``set_epoch`` to the batch
    sampler that owns it. Lightning's per-epoch ``set_epoch`` goes to a loader's ``sampler`` and
    to its ``batch_sampler.sampler``, never to the batch sampler itself, so a batch sampler whose
    order depends on its epoch sets ``self.sampler = EpochHook(self)`` (both bucketing samplers
    do)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner

    def set_epoch(self, epoch: int) -> None:
        self.owner.set_epoch(epoch)


class _EpochBatches:
    """The batch-index iterable a :class:`ResumableDataLoader`'s iterators draw from. Each pass
    (a new iterator, or a persistent-workers iterator reset for the next epoch) first settles the
    epoch with the loader, just before the first index is drawn, then drops the batches the
    loader's plan says were trained on already."""

    def __init__(self, loader: ResumableDataLoader, batches) -> None:
        # weakly: the loader's persistent iterator holds this, and a loader -> iterator -> loader
        # circle left the loader to the garbage collector, which closed the iterator's index
        # queues before the iterator's shutdown sent its workers the word to stop: each worker
        # was then waited for 5 s (torch's MP_STATUS_CHECK_INTERVAL) and killed, at every loader's
        # end
        self._loader = weakref.ref(loader)
        self.batches = batches

    @property
    def loader(self) -> ResumableDataLoader:
        loader = self._loader()
        if loader is None:  # only an iterator outliving its loader can get here
            raise RuntimeError("the ResumableDataLoader of this iterator is gone")
        return loader

    def __iter__(self) -> Iterator[list[int]]:
        resume_epoch, skip = self.loader._plan
        self.loader._begin(resume_epoch)
        for i, batch in enumerate(self.batches):
            if i >= skip:
                yield batch

    def __len__(self) -> int:
        return max(0, len(self.batches) - self.loader._plan[1])


def _epoch_holders(loader: DataLoader) -> list[Any]:
    """The objects whose ``epoch`` decides the order: the sampler, the batch sampler and its
    ``sampler`` (whichever have ``set_epoch``); Lightning's ``_set_sampler_epoch`` reaches the
    first and the last."""
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

    The loader, not the number Lightning passes to ``set_epoch``, decides the resumed epoch.
    Lightning's own count can be one ahead: ``trainer.save_checkpoint`` after a ``fit`` that
    stopped at ``max_steps`` mid-epoch saves that epoch as finished, and the resumed fit loop
    finishes the epoch's remaining batches under the next epoch's number (its ``current_epoch``
    and ``set_epoch``). The resumed iterator keeps the saved epoch; the difference to the first
    number ``set_epoch`` gets after the resume is kept and added to every later one, so each later
    epoch is drawn in the uninterrupted run's order too. Without a resume the difference is 0.

    Give it a ``generator``: the iterator's base seed (for worker seeding) is then drawn from it,
    re-seeded per epoch, instead of from the global torch RNG that dropout uses.
    """

    # the current pass: (its saved epoch if it resumes a checkpoint, else None; batches skipped)
    _plan: tuple[int | None, int] = (None, 0)
    _resume_epoch: int | None = None  # the saved epoch the next iterator resumes
    _pending_skip = 0  # and the batches it skips
    _outside = 0  # the number last given to set_epoch (by Lightning or by hand)
    _written: int | None = None  # the epoch the loader itself last gave the samplers
    _offset = 0  # the loader's epoch minus the set_epoch number
    _offset_pending = False  # resumed, and no set_epoch seen since to fix the offset from
    _building = False  # __iter__ is building an iterator: _index_sampler gives _EpochBatches

    def state_dict(self) -> dict[str, int]:
        if self._resume_epoch is not None:  # loaded, not iterated yet
            return {"epoch": self._resume_epoch, "batches": self._pending_skip}
        if not hasattr(self, "_iter_epoch"):
            return {"epoch": self._sampler_epoch(), "batches": 0}
        return {"epoch": self._iter_epoch, "batches": self._yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        epoch, skip = int(state["epoch"]), int(state["batches"])
        if skip >= len(self):  # the epoch was finished: the next one starts from its first batch
            epoch, skip = epoch + 1, 0
        self._set_epoch(epoch)
        self._outside, self._offset, self._offset_pending = epoch, 0, True
        self._resume_epoch, self._pending_skip = epoch, skip

    def _sampler_epoch(self) -> int:
        epochs = [int(h.epoch) for h in _epoch_holders(self) if hasattr(h, "epoch")]
        return epochs[0] if epochs else 0

    def _set_epoch(self, epoch: int) -> None:
        for holder in _epoch_holders(self):
            holder.set_epoch(epoch)
        self._written = epoch

    def _settle(self) -> int:
        """The epoch of a pass that is not a resume: the last ``set_epoch`` number plus the
        offset. The samplers' epoch differing from the one the loader last gave them means
        ``set_epoch`` was called since: the first such call after a resume fixes the offset, the
        pass it is for being the one after the resumed pass."""
        now = self._sampler_epoch()
        if now != self._written:
            if self._offset_pending:
                self._offset = self._iter_epoch + 1 - now
                self._offset_pending = False
            self._outside = now
        return self._outside + self._offset

    def _begin(self, resume_epoch: int | None) -> None:
        """Settles a pass's epoch and gives it to the samplers; called when ``__iter__`` starts
        and again when the pass draws its first index (Lightning calls ``set_epoch`` in between
        for the first iterator of a fit). A resumed pass keeps the saved epoch; a ``set_epoch``
        number seen by then is Lightning's for that same epoch, and fixes the offset."""
        if resume_epoch is not None:
            epoch = resume_epoch
            now = self._sampler_epoch()
            if self._offset_pending and now != self._written:
                self._offset, self._offset_pending, self._outside = epoch - now, False, now
        else:
            epoch = self._settle()
        self._set_epoch(epoch)
        self._iter_epoch = epoch

    @property
    def _index_sampler(self):
        base = super()._index_sampler
        return _EpochBatches(self, base) if self._building else base

    def __iter__(self):
        self._plan = (self._resume_epoch, self._pending_skip)
        self._resume_epoch, self._pending_skip = None, 0
        self._begin(self._plan[0])
        epoch = self._iter_epoch
        if self.generator is not None:
            if not hasattr(self, "_generator_seed"):
                self._generator_seed = self.generator.initial_seed()
            seed = np.random.SeedSequence([self._generator_seed, epoch]).generate_state(
                1, np.uint64
            )[0]
            self.generator.manual_seed(int(seed) & (2**63 - 1))
        self._yielded = self._plan[1]
        self._building = True
        try:
            iterator = super().__iter__()  # builds its index iterator from _index_sampler now
        finally:
            self._building = False
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
    the first resumed training step. A resume from a checkpoint saved after a fit that stopped on
    an epoch's last batch also has its count of that epoch's batches set back there, so that the
    next epoch trains whole (:func:`_start_the_next_epoch_whole`).
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return _rng_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:  # a resume, of a checkpoint written with this callback
            if trainer is not None:  # (the fused loop, which has none, puts back the states alone)
                _start_the_next_epoch_whole(trainer)
            _set_rng_states(self._pending)
            self._pending = None


def _start_the_next_epoch_whole(trainer: pl.Trainer) -> None:
    """A fit resumed from ``trainer.save_checkpoint`` after a fit that stopped at ``max_steps`` on
    an epoch's last batch: Lightning restores that epoch as finished but keeps its count of the
    epoch's batches, so the resumed fit trained one batch of the next epoch and then ended it (the
    rest of that epoch never trained; a plain ``DataLoader`` the same). The count is set back to
    zero here, as Lightning itself does for a checkpoint written on an epoch's last batch during
    the fit, so the next epoch trains whole. Lightning's loop progress counters: listed in
    docs/internals.md."""
    fit = trainer.fit_loop
    loop = fit.epoch_loop
    epochs, batches = fit.epoch_progress.total, loop.batch_progress.current
    if not (loop.restarting and epochs.ready and epochs.completed == epochs.ready):
        return  # not a resume, or one from inside an epoch (its own restart handles it)
    if batches.completed != batches.ready or batches.ready < trainer.num_training_batches:
        return  # the epoch's last batch not reached: the resumed pass finishes the epoch
    loop.batch_progress.reset_on_run()
    loop.scheduler_progress.reset_on_run()
    loop.automatic_optimization.optim_progress.reset_on_run()
    loop.val_loop.batch_progress.total.reset()
