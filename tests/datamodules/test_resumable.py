"""Exact resume from the two kinds of checkpoint a fit stopped mid-epoch or at an epoch's end
leaves: one written by ``ModelCheckpoint`` during the fit, and one written by
``trainer.save_checkpoint`` after ``fit`` returned at ``max_steps`` (the README's example). Lightning saves the second with the epoch
counted as finished; the loader must still resume the saved epoch, and draw the epochs after it
in the uninterrupted run's order.
"""

from __future__ import annotations

import gc
import weakref

import lightning.pytorch as pl
import pytest
import torch
from model_helpers import small_memory_run

from datamodules.resumable import EpochRandomSampler, ResumableDataLoader, RngStateCallback

SEED = 5
BATCHES_PER_EPOCH = 8  # train_size 64 / batch_size 8
STOP_AT = 5  # mid-epoch 0
MAX_STEPS = 14  # into epoch 1


class Batches(pl.Callback):
    """The first source token of every training batch, by global step."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen[trainer.global_step] = int(batch["src"][0, 0])


def fit(quiet_trainer, max_steps: int, ckpt_path=None, callbacks=()):
    """One fit from scratch objects; returns (module, trainer, the batches it trained on)."""
    pl.seed_everything(SEED, verbose=False)
    dm, module = small_memory_run(SEED, 8, BATCHES_PER_EPOCH, 8)
    batches = Batches()
    trainer = quiet_trainer(
        max_steps=max_steps,
        max_epochs=-1,
        limit_val_batches=0,
        callbacks=[batches, RngStateCallback(), *callbacks],
        enable_checkpointing=bool(callbacks),
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return module, trainer, batches.seen


@pytest.fixture(scope="module")
def uninterrupted(quiet_trainer):
    module, _, seen = fit(quiet_trainer, MAX_STEPS)
    return module, seen


@pytest.mark.train
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
@pytest.mark.parametrize("saved_by", ["save_checkpoint-after-fit", "ModelCheckpoint-during-fit"])
@pytest.mark.parametrize("stop", [STOP_AT, BATCHES_PER_EPOCH], ids=["mid-epoch", "epoch-end"])
def test_a_fit_stopped_mid_epoch_resumes_bit_for_bit(
    tmp_path, uninterrupted, quiet_trainer, saved_by, stop
):
    """At the epoch's end too: saved after a fit that stopped on an epoch's last batch, the resumed
    fit trained the next epoch's first batch, then ended that epoch and went on to the one after
    (Lightning kept the finished epoch's batch count)."""
    reference, reference_batches = uninterrupted
    if saved_by == "save_checkpoint-after-fit":
        _, trainer, _ = fit(quiet_trainer, stop)
        checkpoint = tmp_path / "stopped.ckpt"
        trainer.save_checkpoint(checkpoint)
    else:
        every = pl.callbacks.ModelCheckpoint(
            dirpath=tmp_path, every_n_train_steps=stop, save_top_k=-1
        )
        fit(quiet_trainer, stop, callbacks=[every])
        (checkpoint,) = tmp_path.glob(f"*step={stop}.ckpt")

    resumed, _, batches = fit(quiet_trainer, MAX_STEPS, ckpt_path=checkpoint)

    assert batches == {s: b for s, b in reference_batches.items() if s > stop}
    ref_state, state = reference.state_dict(), resumed.state_dict()
    different = [k for k in ref_state if not torch.equal(ref_state[k], state[k])]
    assert not different, f"resumed from {saved_by}: {len(different)} tensors differ"


def validated_fit(quiet_trainer, max_steps: int, ckpt_path=None, callbacks=(), workers: int = 1):
    """:func:`fit` with a persistent loader worker and validation every 4 steps (after Lightning's
    sanity check, which a resumed fit skips)."""
    pl.seed_everything(SEED, verbose=False)
    dm, module = small_memory_run(SEED, 8, BATCHES_PER_EPOCH, 8)
    dm.num_workers = workers
    trainer = quiet_trainer(
        max_steps=max_steps,
        max_epochs=-1,
        val_check_interval=4,
        check_val_every_n_epoch=None,
        callbacks=[RngStateCallback(), *callbacks],
        enable_checkpointing=bool(callbacks),
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return module


@pytest.mark.train
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_a_fit_with_loader_workers_and_validation_resumes_bit_for_bit(tmp_path, quiet_trainer):
    """Each new iterator of a loader without a generator of its own draws its workers' base seed
    from the global torch RNG, the one dropout draws from. The validation loader's persistent
    iterator is made at the sanity check in a fit from scratch, at the first validation in a
    resumed one: the resumed fit drew once more, and its dropout went another way from there
    (K=4, dropout 0.3, one worker). Without workers a new iterator each validation drew, so the
    same fit without workers trained to other weights too."""
    reference = validated_fit(quiet_trainer, MAX_STEPS)
    every = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=STOP_AT, save_top_k=-1
    )
    validated_fit(quiet_trainer, STOP_AT, callbacks=[every])
    (checkpoint,) = tmp_path.glob(f"*step={STOP_AT}.ckpt")
    resumed = validated_fit(quiet_trainer, MAX_STEPS, ckpt_path=checkpoint)
    in_process = validated_fit(quiet_trainer, MAX_STEPS, workers=0)
    ref_state = reference.state_dict()
    for other in (resumed, in_process):
        state = other.state_dict()
        assert [k for k in ref_state if not torch.equal(ref_state[k], state[k])] == []


@pytest.mark.parametrize("workers", [0, 1], ids=["in-process", "persistent-worker"])
@pytest.mark.parametrize(
    "ahead", [0, 1], ids=["ModelCheckpoint-during-fit", "save_checkpoint-after-fit"]
)
def test_the_resumed_epoch_is_the_saved_one_and_later_epochs_follow_it(workers, ahead):
    """Lightning's calls on resume: ``load_state_dict``, ``iter``, ``set_epoch`` with its
    ``current_epoch`` (``ahead`` of the saved epoch after a ``save_checkpoint`` written once ``fit``
    stopped mid-epoch), the epoch's last batches; then ``set_epoch`` and ``iter`` every epoch (a
    persistent-workers loader reuses its first iterator: the skip is for the resumed epoch only)."""
    data = list(range(40))

    def loader():
        return ResumableDataLoader(
            data,
            batch_size=4,
            sampler=EpochRandomSampler(data, seed=7),
            num_workers=workers,
            persistent_workers=workers > 0,
            generator=torch.Generator().manual_seed(1),
        )

    reference = ResumableDataLoader(data, batch_size=4, sampler=EpochRandomSampler(data, seed=7))
    epochs = []
    for epoch in range(3):
        reference.sampler.set_epoch(epoch)
        epochs.append([b.tolist() for b in reference])

    resumed = loader()
    resumed.load_state_dict({"epoch": 0, "batches": 3})
    it = iter(resumed)
    resumed.sampler.set_epoch(ahead)
    assert [b.tolist() for b in it] == epochs[0][3:]
    assert resumed.state_dict() == {"epoch": 0, "batches": len(epochs[0])}
    for epoch in (1, 2):
        resumed.sampler.set_epoch(epoch + ahead)
        assert [b.tolist() for b in resumed] == epochs[epoch]
        assert resumed.state_dict() == {"epoch": epoch, "batches": len(epochs[epoch])}


def test_a_persistent_workers_loader_dropped_stops_its_workers_at_once():
    """Dropped, a loader with persistent workers is freed at once, not left to the garbage
    collector in a circle with its iterator: there the iterator's queues were closed before its
    shutdown told the workers to stop, and each worker was waited for 5 s, then killed."""
    data = list(range(40))
    loader = ResumableDataLoader(
        data,
        batch_size=4,
        sampler=EpochRandomSampler(data, seed=7),
        num_workers=1,
        persistent_workers=True,
        generator=torch.Generator().manual_seed(1),
    )
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        assert sorted(i for b in loader for i in b.tolist()) == data
    workers = list(loader._iterator._workers)  # torch's own list of the worker processes
    gone = weakref.ref(loader)
    gc.disable()  # freed by its reference count alone
    try:
        del loader
        assert gone() is None
    finally:
        gc.enable()
    for w in workers:
        w.join(timeout=30)
        assert w.exitcode == 0  # stopped when told, not terminated
