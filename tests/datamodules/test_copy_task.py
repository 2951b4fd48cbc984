"""CopyTaskDataModule: determinism, lengths, batch format per docs/CONTRACTS.md (fast)."""

from __future__ import annotations

import typing

import annotated_types
import numpy as np
import pytest
import torch

from datamodules import CopyTaskDataModule
from datamodules.ranges import declared_ranges


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
    assert dm.ids_to_text(torch.tensor([1, 9, 3, 2, 9])) == "9"  # BOS/UNK dropped, stops at EOS
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
