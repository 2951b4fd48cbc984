"""A small model on a small copy task, as the exact-resume tests build it from scratch objects for
each attempt: memory attention K=4 with dropout (so resuming must restore the random state too)."""

from __future__ import annotations

from datamodules.copy_task import CopyTaskDataModule
from lightning_modules import Seq2SeqModule


def small_memory_run(
    seed: int, batch_size: int, batches_per_epoch: int, val_size: int
) -> tuple[CopyTaskDataModule, Seq2SeqModule]:
    """The copy task (symbols 8, lengths 1..6) set up for fit, and a tiny memory-attention model
    (K=4, dropout 0.3) sized for it."""
    dm = CopyTaskDataModule(
        vocab_size=8,
        max_length=6,
        min_length=1,
        train_size=batch_size * batches_per_epoch,
        val_size=val_size,
        test_size=0,
        batch_size=batch_size,
        seed=seed,
    )
    dm.setup("fit")
    module = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": 4},
        preset="tiny",
        dropout=0.3,
        max_source_len=dm.max_source_len,
        lr=3e-3,
    )
    return dm, module
