"""CopyTaskDataModule: determinism, lengths, batch format per docs/CONTRACTS.md (fast)."""

from __future__ import annotations

import re
import typing
import warnings
from pathlib import Path

import annotated_types
import lightning.pytorch as pl
import numpy as np
import pytest
import torch

import datamodules.copy_task
from datamodules import CopyTaskDataModule
from datamodules.copy_task import SmallTestSplitWarning, collate_copy
from datamodules.ranges import declared_ranges

ROOT = Path(__file__).resolve().parents[2]


def make(**kwargs) -> CopyTaskDataModule:
    defaults = dict(train_size=2000, val_size=300, test_size=300, batch_size=32)
    defaults.update(kwargs)
    dm = CopyTaskDataModule(**defaults)
    dm.setup("fit")
    return dm


def test_deterministic_from_seed_and_splits_differ():
    a, b, c = make(seed=7), make(seed=7), make(seed=8)
    for split in ("train", "val", "test"):
        assert np.array_equal(a.datasets[split].tokens, b.datasets[split].tokens)
        assert np.array_equal(a.datasets[split].offsets, b.datasets[split].offsets)
    assert not np.array_equal(a.datasets["val"].tokens[:200], c.datasets["val"].tokens[:200])
    assert not np.array_equal(a.datasets["train"].tokens[:200], a.datasets["val"].tokens[:200])
    first = [next(iter(dm.train_dataloader()))["src"] for dm in (a, b)]
    assert torch.equal(*first)  # shuffling is seeded too


def test_lengths_and_symbols_in_range():
    dm = make(vocab_size=5, min_length=0, max_length=6)
    lengths = dm.datasets["train"].lengths()
    assert lengths.min() == 0 and lengths.max() == 6  # both ends occur in 2000 samples
    assert set(np.unique(lengths)) == set(range(7))
    tokens = dm.datasets["train"].tokens
    assert tokens.min() >= 4 and tokens.max() <= 5 + 3
    dm = make(min_length=3, max_length=4)
    assert set(np.unique(dm.datasets["val"].lengths())) == {3, 4}


def test_batch_format_follows_contract():
    dm = make(vocab_size=20, max_length=10)
    assert (dm.pad_id, dm.bos_id, dm.eos_id) == (0, 1, 2)
    assert dm.src_vocab_size == dm.tgt_vocab_size == 24
    assert dm.max_source_len == 11
    seen_empty = False
    for batch in dm.val_dataloader():
        src, lengths = batch["src"], batch["src_lengths"]
        assert src.dtype == torch.long and lengths.dtype == torch.long
        assert torch.equal(batch["tgt"], src) and torch.equal(batch["tgt_lengths"], lengths)
        assert (lengths >= 1).all() and src.shape[1] == int(lengths.max()) <= dm.max_source_len
        for row, n in zip(src, lengths):
            assert row[n - 1] == dm.eos_id
            assert (row[: n - 1] >= 4).all()
            assert (row[n:] == dm.pad_id).all()
            seen_empty |= int(n) == 1
    assert seen_empty  # an empty sequence is just EOS


def test_ids_to_text():
    dm = make()
    assert dm.ids_to_text([7, 12, 5, 2, 0, 0]) == "7 12 5"
    # BOS dropped, stops at EOS; an unknown token stays: where a model emits one, BLEU counts a
    # wrong token, not a shorter sentence
    assert dm.ids_to_text(torch.tensor([1, 9, 3, 2, 9])) == "9 3"
    assert dm.ids_to_text([2]) == ""


@pytest.mark.parametrize(
    "key,value,bound",
    [
        ("vocab_size", 0, ">= 1"),
        ("max_length", 0, ">= 1"),
        ("train_size", 0, ">= 1"),
        ("val_size", 0, ">= 1"),
        ("batch_size", 0, ">= 1"),
        ("min_length", -1, ">= 0"),
        ("num_workers", -2, ">= 0"),
    ],
)
def test_out_of_range_arguments_fail_naming_the_argument(key, value, bound):
    with pytest.raises(
        ValueError, match=f"^CopyTaskDataModule: {key} must be {bound}, got {value}$"
    ):
        CopyTaskDataModule(**{key: value})


@pytest.mark.parametrize("value", ["false", "False", 1, None, np.bool_(False)], ids=repr)
def test_bucket_batches_takes_only_true_or_false(value):
    """bucket_batches="false" is truthy: the train loader bucketed its batches without a word."""
    with pytest.raises(
        ValueError, match=r"^CopyTaskDataModule: bucket_batches must be True or False, got "
    ):
        CopyTaskDataModule(bucket_batches=value)
    assert CopyTaskDataModule(bucket_batches=False).hparams.bucket_batches is False


@pytest.mark.parametrize("value", [None, True, False])
def test_a_count_given_none_or_a_bool_fails_naming_it(value):
    """batch_size=None or True got past the range check (it skipped None and bools)."""
    with pytest.raises(
        ValueError,
        match=rf"^CopyTaskDataModule: batch_size must be a whole number >= 1, got {value}",
    ):
        CopyTaskDataModule(batch_size=value)


def test_ranges_are_declared_as_plain_annotated_types_markers():
    hints = typing.get_type_hints(CopyTaskDataModule.__init__, include_extras=True)
    assert hints["batch_size"].__metadata__ == (annotated_types.Ge(1),)
    assert declared_ranges(CopyTaskDataModule.__init__)["test_size"] == ((">=", 0),)
    assert "seed" in declared_ranges(CopyTaskDataModule.__init__)


def test_test_split_is_held_out_from_train_and_validation():
    """Short sequences over 3 symbols collide often: every test sequence that also occurs in train
    or validation is drawn again from the test split's own generator, and the split keeps its size."""
    dm = make(vocab_size=3, min_length=1, max_length=6, train_size=300, val_size=50, test_size=100)
    raw = [dm.datasets["test"][i].tobytes() for i in range(100)]
    seen = {
        dm.datasets[s][i].tobytes() for s in ("train", "val") for i in range(len(dm.datasets[s]))
    }
    assert sum(q in seen for q in raw) > 0  # collisions existed before
    batch = next(iter(dm.test_dataloader()))
    test = dm.datasets["test"]
    assert len(test) == 100 and dm.test_redrawn == sum(q in seen for q in raw)
    assert not any(test[i].tobytes() in seen for i in range(len(test)))
    assert batch["src"].shape[0] == 32
    # a function of the seed alone, like the other splits
    again = make(
        vocab_size=3, min_length=1, max_length=6, train_size=300, val_size=50, test_size=100
    )
    assert np.array_equal(again.held_out_test().tokens, test.tokens)


class _EpochBatches(pl.Callback):
    """The training batches of every epoch, as tuples of their source rows."""

    def __init__(self) -> None:
        self.epochs: dict[int, list[tuple]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        rows = tuple(tuple(row) for row in batch["src"].tolist())
        self.epochs.setdefault(trainer.current_epoch, []).append(rows)


def test_bucketed_batches_are_drawn_anew_every_epoch_of_a_fit(quiet_trainer):
    """Lightning calls ``set_epoch`` on a loader's ``sampler`` and ``batch_sampler.sampler`` only;
    the bucketing batch sampler had neither, so every epoch replayed epoch 0's batches."""
    from lightning_modules import Seq2SeqModule

    dm = make(train_size=48, val_size=8, test_size=8, batch_size=8, bucket_batches=True)
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="none")
    seen = _EpochBatches()
    trainer = quiet_trainer(max_epochs=3, limit_val_batches=0, callbacks=[seen])
    trainer.fit(model, datamodule=dm)

    assert sorted(seen.epochs) == [0, 1, 2]
    orders = [seen.epochs[e] for e in range(3)]
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]
    sampler = dm.train_dataloader().batch_sampler
    for epoch, batches in enumerate(orders):  # each epoch is that epoch's (seed, epoch) order
        sampler.set_epoch(epoch)
        assert batches == [
            tuple(
                tuple(r) for r in collate_copy([dm.datasets["train"][i] for i in b])["src"].tolist()
            )
            for b in sampler.batches()
        ]


@pytest.mark.parametrize("ahead", [0, 1])
def test_a_bucketed_loader_resumes_mid_epoch_through_lightnings_set_epoch_calls(ahead):
    """With Lightning's ``set_epoch`` now reaching the bucketing sampler (through its ``sampler``),
    a loader restored mid-epoch still finishes the saved epoch and then follows the
    uninterrupted run's epochs (``ahead``: the number ``trainer.save_checkpoint`` after a fit
    stopped at ``max_steps`` leaves Lightning one epoch ahead)."""
    dm = make(train_size=40, batch_size=4, bucket_batches=True)
    reference = dm.train_dataloader()
    epochs = []
    for epoch in range(3):
        reference.batch_sampler.sampler.set_epoch(epoch)
        epochs.append([b["src"].tolist() for b in reference])
    assert epochs[0] != epochs[1]

    resumed = dm.train_dataloader()
    resumed.load_state_dict({"epoch": 0, "batches": 3})
    it = iter(resumed)
    resumed.batch_sampler.sampler.set_epoch(ahead)  # what Lightning's _set_sampler_epoch reaches
    assert [b["src"].tolist() for b in it] == epochs[0][3:]
    for epoch in (1, 2):
        resumed.batch_sampler.sampler.set_epoch(epoch + ahead)
        assert [b["src"].tolist() for b in resumed] == epochs[epoch]


@pytest.mark.parametrize("bucket_batches", [False, True])
def test_every_batch_carries_its_sequences_positions_in_the_split(bucket_batches):
    """``indices`` (docs/CONTRACTS.md) on the copy task's batches too: each row is the split's
    sequence at that position; evaluation batches cover the split once, in order."""
    dm = make(
        vocab_size=3,
        max_length=5,
        train_size=40,
        val_size=30,
        test_size=30,
        batch_size=8,
        bucket_batches=bucket_batches,
    )
    loaders = {"train": dm.train_dataloader(), "val": dm.val_dataloader()}
    loaders["test"] = dm.test_dataloader()  # after the redraws: positions in the held-out split
    for split, loader in loaders.items():
        seen = []
        for batch in loader:
            assert batch["indices"].dtype == torch.long
            assert batch["indices"].shape == batch["src_lengths"].shape
            expected = collate_copy([dm.datasets[split][i] for i in batch["indices"].tolist()])
            assert torch.equal(batch["src"], expected["src"])
            seen += batch["indices"].tolist()
        assert sorted(seen) == list(range(len(dm.datasets[split])))
        if split != "train":
            assert seen == sorted(seen)


def test_an_empty_held_out_test_split_is_refused_naming_what_to_change():
    """Two symbols and lengths up to 4 make 31 sequences, all in a 10,000-sequence training split:
    the test split came out empty and trainer.test returned [] without a word."""
    settings = dict(vocab_size=2, max_length=4, train_size=10_000, val_size=100, test_size=1000)
    dm = make(**settings)
    with pytest.raises(
        ValueError, match=r"held-out test split is empty \(test_size=1000\)"
    ) as info:
        dm.test_dataloader()
    said = str(info.value)
    assert "of the 31 distinct sequences" in said and "hold 31" in said
    assert "Raise vocab_size or max_length, or lower train_size" in said
    assert said.endswith("or pass test_size=0 to skip testing")
    skipped = make(**{**settings, "test_size": 0})  # no test split asked for: none, no error
    assert len(skipped.held_out_test()) == 0


def test_a_short_held_out_test_split_is_warned_of_with_its_size_and_why():
    dm = make(vocab_size=2, max_length=4, train_size=60, val_size=10, test_size=100)
    with pytest.warns(
        SmallTestSplitWarning, match=r"has (\d+) sequences, not test_size=100"
    ) as caught:
        test = dm.held_out_test()
    said = str(caught[0].message)
    assert f"has {len(test)} sequences" in said and 0 < len(test) < 100
    assert "of the 31 distinct sequences of lengths 0..4 over vocab_size=2" in said
    assert issubclass(SmallTestSplitWarning, UserWarning)
    defaults = CopyTaskDataModule()  # and the defaults (as every shipped sweep's) draw it whole
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallTestSplitWarning)
        assert len(defaults.held_out_test()) == 1000


def split_figures(**kwargs) -> dict[str, object]:
    """What the module docstring and docs/reading-results.md say of the copy task's splits."""
    dm = CopyTaskDataModule(**kwargs)
    dm.setup("fit")
    train = {dm.datasets["train"][i].tobytes() for i in range(len(dm.datasets["train"]))}
    val = dm.datasets["val"]
    shared = [len(val[i]) for i in range(len(val)) if val[i].tobytes() in train]
    before = dm.datasets["test"].lengths()
    after = dm.held_out_test().lengths()
    return {
        "val_in_train": len(shared),
        "longest_shared": max(shared),
        "redrawn": dm.test_redrawn,
        "mean_before": f"{before.mean():.2f}",
        "mean_after": f"{after.mean():.2f}",
        "short_before": np.bincount(before, minlength=4)[:4].tolist(),
        "short_after": np.bincount(after, minlength=4)[:4].tolist(),
    }


def test_the_figures_said_of_the_splits_are_the_measured_ones():
    """Train and validation lengths are uniform, but the test split's redraws remove the short
    sequences and validation shares its short ones with training: the docstring and the results
    page say so with these figures (the docstring said all lengths were uniform)."""
    doc = " ".join(datamodules.copy_task.__doc__.split())
    page = " ".join((ROOT / "docs" / "reading-results.md").read_text().split())
    d = split_figures()
    assert d == {
        "val_in_train": 339,
        "longest_shared": 4,
        "redrawn": 299,
        "mean_before": "5.24",
        "mean_after": "6.91",
        "short_before": [79, 89, 68, 87],
        "short_after": [0, 0, 0, 43],
    }
    assert (
        "339 of the 1,000 validation sequences also occur in training, all of them of length 0 to 4"
        in doc
    )
    assert "299 of its 1,000 sequences are drawn again" in doc
    assert (
        "no sequence of length 0, 1 or 2 (79, 89 and 68 before) and 43 of length 3 (87 before)"
        in doc
    )
    assert "mean length is 6.91 against 5.24 before" in doc
    assert (
        "339 of the 1,000 validation sequences also occur in training, all of length 0 to 4" in page
    )
    assert "mean length of 6.91 against 5.24 before the redraws" in page
    at_20 = split_figures(max_length=20)
    assert (at_20["val_in_train"], at_20["redrawn"]) == (158, 155)
    assert (at_20["mean_after"], at_20["mean_before"]) == ("12.06", "10.48")
    assert re.search(r"at max_length=20, 158;", doc) and "158 at `max_length: 20`" in page
    assert "155 are drawn again and the mean length is 12.06 against 10.48" in doc
    assert "12.06 against 10.48 at `max_length: 20`" in page
    for length, shared in ((50, 60), (200, 15)):
        assert split_figures(max_length=length)["val_in_train"] == shared
        assert f"at max_length={length}, {shared}" in doc
    assert "15 at `max_length: 200`" in page
