"""A fit stopped at any validation report and resumed from that report's
checkpoint ends bit for bit where the uninterrupted fit ends (same seed, same machine).

No Ray: a plain Lightning Trainer checkpointing the way ``sweeps.trial.callbacks.TuneReport`` does
(the whole state, after every validation), seeded the way ``prepare_trial`` seeds, with the
resume callback ``prepare_trial`` adds.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from model_helpers import small_memory_run

from datamodules.resumable import ResumableDataLoader, RngStateCallback

SEED = 3
BATCHES_PER_EPOCH = 10  # train_size 160 / batch_size 16
VAL_EVERY = 5
MAX_STEPS = 30
COMPARED = ("val/loss", "val/bleu", "val/token_acc")  # val/decode_seconds is a wall-clock time


class Interrupted(RuntimeError):
    """Stands for the crash of a trial attempt right after a report."""


class SaveEachValidation(pl.Callback):
    """``TuneReport``'s checkpoint: ``trainer.save_checkpoint(weights_only=False)`` after every
    validation; raises :class:`Interrupted` after the save at ``stop_at``."""

    def __init__(self, folder: Path, stop_at: int | None = None) -> None:
        self.folder = folder
        self.stop_at = stop_at
        self.metrics: dict[str, float] = {}

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        trainer.save_checkpoint(self.folder / f"step{trainer.global_step}.ckpt", weights_only=False)
        self.metrics = {k: float(trainer.callback_metrics[k]) for k in COMPARED}
        if trainer.global_step == self.stop_at:
            raise Interrupted(f"stopped after the report at step {trainer.global_step}")


def fit(quiet_trainer, folder: Path, stop_at: int | None = None, ckpt_path: Path | None = None):
    """One trial attempt from scratch objects; returns (module, final val metrics)."""
    pl.seed_everything(SEED, workers=True, verbose=False)
    dm, module = small_memory_run(SEED, 16, BATCHES_PER_EPOCH, 32)
    saver = SaveEachValidation(folder, stop_at)
    trainer = quiet_trainer(
        max_steps=MAX_STEPS,
        max_epochs=-1,
        val_check_interval=VAL_EVERY,
        check_val_every_n_epoch=None,
        callbacks=[saver, RngStateCallback()],
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return module, saver.metrics


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, quiet_trainer):
    return fit(quiet_trainer, tmp_path_factory.mktemp("uninterrupted"))


def max_weight_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


@pytest.mark.train
@pytest.mark.parametrize(
    "stop_at", [5, 10, 25], ids=["mid-epoch-0", "epoch-boundary", "mid-epoch-2"]
)
def test_a_fit_resumed_from_a_report_ends_bit_for_bit_like_the_uninterrupted_fit(
    tmp_path, uninterrupted, stop_at, quiet_trainer
):
    reference, reference_metrics = uninterrupted
    with pytest.raises(Interrupted):
        fit(quiet_trainer, tmp_path, stop_at=stop_at)
    resumed, metrics = fit(quiet_trainer, tmp_path, ckpt_path=tmp_path / f"step{stop_at}.ckpt")

    difference = max_weight_difference(reference, resumed)
    assert difference == 0.0, f"resumed at step {stop_at}: weights differ by up to {difference}"
    ref_state, state = reference.state_dict(), resumed.state_dict()
    assert all(torch.equal(ref_state[k], state[k]) for k in ref_state)
    assert metrics == reference_metrics


def test_the_train_loader_saves_its_position_and_resumes_at_the_next_batch():
    data = list(range(50))
    loader = ResumableDataLoader(
        data, batch_size=4, sampler=_epoch_sampler(data), generator=torch.Generator().manual_seed(1)
    )
    loader.sampler.set_epoch(2)
    epoch2 = [b.tolist() for b in loader]
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    assert state == {"epoch": 2, "batches": 3}

    fresh = ResumableDataLoader(
        data, batch_size=4, sampler=_epoch_sampler(data), generator=torch.Generator().manual_seed(1)
    )
    fresh.load_state_dict(state)
    assert [b.tolist() for b in fresh] == epoch2[3:]
    assert fresh.state_dict() == {"epoch": 2, "batches": len(epoch2)}

    finished = ResumableDataLoader(data, batch_size=4, sampler=_epoch_sampler(data))
    finished.load_state_dict(
        {"epoch": 2, "batches": len(epoch2)}
    )  # a report at the epoch's last batch
    loader.sampler.set_epoch(3)
    assert [b.tolist() for b in finished] == [b.tolist() for b in loader]


def test_the_wmt_bucketing_loader_resumes_at_the_next_batch():
    from datamodules.bucketing import TokenBucketBatchSampler

    lengths = np.random.default_rng(0).integers(2, 30, size=200)

    def loader():
        sampler = TokenBucketBatchSampler(lengths, lengths[::-1].copy(), batch_tokens=120, seed=5)
        return ResumableDataLoader(
            list(range(200)),
            batch_sampler=sampler,
            collate_fn=list,
            generator=torch.Generator().manual_seed(5),
        )

    first = loader()
    first.batch_sampler.set_epoch(1)
    epoch1 = list(first)
    it = iter(first)
    next(it), next(it)
    fresh = loader()
    fresh.load_state_dict(first.state_dict())
    assert list(fresh) == epoch1[2:]


def _epoch_sampler(data):
    from datamodules.resumable import EpochRandomSampler

    return EpochRandomSampler(data, seed=7)


def test_the_rng_states_round_trip_through_the_callback():
    callback = RngStateCallback()
    torch.manual_seed(11)
    np.random.seed(11)
    import random

    random.seed(11)
    saved = callback.state_dict()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    restored = RngStateCallback()
    restored.load_state_dict(torch.load(_round_trip(saved), weights_only=True))
    restored.on_train_start(None, None)  # type: ignore[arg-type]  # as the fused loop calls it
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert (
        torch.equal(got[0], expected[0])
        and np.array_equal(got[1], expected[1])
        and got[2] == expected[2]
    )


def _round_trip(obj):
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer
