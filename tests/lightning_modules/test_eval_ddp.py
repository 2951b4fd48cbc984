"""Evaluation figures under DDP count each sentence once: the samplers give every rank the same
number of batches by repeating sentences (TokenBucketBatchSampler repeats the split's first
batches, Lightning's DistributedSampler its first sentences), and the module keeps one sentence
(its hypothesis, its loss and tokens) per batch ``indices`` entry, in index order, whatever the
number of ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from torch.utils.data import DataLoader

from datamodules import CopyTaskDataModule
from datamodules.bucketing import TokenBucketBatchSampler
from datamodules.copy_task import NumberedCopyDataset, collate_copy, collate_numbered
from lightning_modules import Seq2SeqModule
from lightning_modules.metric_names import VAL_BLEU, VAL_LOSS, VAL_TOKEN_ACC
from lightning_modules.module import first_per_index

ROOT = Path(__file__).resolve().parents[2]


def test_first_per_index_keeps_the_first_of_each_index_in_index_order():
    hyps, refs, loss, empty = first_per_index(
        [3, 1, 3, 0, 1],
        ["c", "a", "C", "z", "A"],
        ["r3", "r1", "x", "r0", "y"],
        [3, 1, 9, 0, 9],
        [],
    )
    assert hyps == ["z", "a", "c"] and refs == ["r0", "r1", "r3"] and loss == [0, 1, 3]
    assert empty == []  # hypotheses where nothing was decoded
    with pytest.raises(ValueError, match="give one index per evaluated sentence"):
        first_per_index([0, 1], ["a"], ["a"])


@pytest.mark.parametrize("batch_size", [3, 8])
def test_the_token_bucket_shards_repeat_sentences_that_first_per_index_removes(batch_size):
    """50 sentences in batches of 8 under 4 ranks: 7 batches padded to 8, so 58 sentences were
    decoded and BLEU counted 8 twice; kept once each, the hypotheses are the split's, in its order,
    the same for every world size."""
    n = 50
    lengths = np.random.default_rng(0).integers(5, 40, n)
    results = {}
    for world_size in (1, 2, 3, 4):
        indices = []
        for rank in range(world_size):
            sampler = TokenBucketBatchSampler(
                lengths,
                lengths,
                batch_size=batch_size,
                shuffle=False,
                rank=rank,
                world_size=world_size,
            )
            assert len(sampler) == -(-len(sampler.all_batches()) // world_size)  # equal counts
            indices += [i for batch in sampler for i in batch]
        if world_size == 4:
            assert len(indices) > n  # the padding repeats sentences
        hyps = [f"hyp {i}" for i in indices]
        refs = [f"ref {i}" for i in indices]
        results[world_size] = first_per_index(indices, hyps, refs)
    expected = [[f"hyp {i}" for i in range(n)], [f"ref {i}" for i in range(n)]]
    assert all(result == expected for result in results.values())


def small_copy() -> CopyTaskDataModule:
    return CopyTaskDataModule(
        vocab_size=6, max_length=5, train_size=16, val_size=9, test_size=5, batch_size=4
    )


def untrained(dm: CopyTaskDataModule) -> Seq2SeqModule:
    torch.manual_seed(0)
    return Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="bahdanau",
        preset="tiny",
        max_source_len=dm.max_source_len,
        max_decode_len=6,
    )


def test_batches_with_repeated_indices_are_counted_once_and_without_indices_as_given(
    quiet_trainer,
):
    """The module's own path, in one process: a loader that serves sentences 0-3 and then 0 and 1
    again (as a padded shard does) gives BLEU, loss and token accuracy over the 4 sentences, BLEU
    in index order; a loader whose batches carry no indices is scored as it comes."""
    dm = small_copy()
    dm.setup("fit")
    model = untrained(dm)
    numbered = NumberedCopyDataset(dm.datasets["val"])
    repeated = DataLoader(
        numbered, batch_size=2, sampler=[2, 3, 0, 1, 0, 1], collate_fn=collate_numbered
    )
    figures = quiet_trainer().validate(model, dataloaders=repeated, verbose=False)[0]
    hyps, refs = model.last_decoded["val"]
    assert refs == [dm.ids_to_text(dm.datasets["val"][i]) for i in range(4)]
    assert len(hyps) == 4
    once = DataLoader(numbered, batch_size=4, sampler=[0, 1, 2, 3], collate_fn=collate_numbered)
    alone = quiet_trainer().validate(model, dataloaders=once, verbose=False)[0]
    for name in (VAL_LOSS, VAL_TOKEN_ACC, VAL_BLEU):
        assert figures[name] == pytest.approx(alone[name], rel=1e-6), name
    # sentences 0 and 1 counted twice move the loss: what the figures were before
    twice = DataLoader(
        [dm.datasets["val"][i] for i in (2, 3, 0, 1, 0, 1)], batch_size=2, collate_fn=collate_copy
    )
    counted = quiet_trainer().validate(model, dataloaders=twice, verbose=False)[0]
    assert counted[VAL_LOSS] != pytest.approx(alone[VAL_LOSS], rel=1e-6)

    plain = DataLoader(
        [dm.datasets["val"][i] for i in (2, 3, 0, 2)], batch_size=2, collate_fn=collate_copy
    )
    quiet_trainer().validate(model, dataloaders=plain, verbose=False)
    _, refs = model.last_decoded["val"]
    assert refs == [dm.ids_to_text(dm.datasets["val"][i]) for i in (2, 3, 0, 2)]


DDP_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import lightning.pytorch as pl
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, {tests!r})
    from test_eval_ddp import small_copy, untrained
    dm = small_copy()
    model = untrained(dm)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.validate(model, datamodule=dm, verbose=False)
    if trainer.global_rank == 0:
        hyps, refs = model.last_decoded["val"]
        figures = {{k: float(v) for k, v in trainer.callback_metrics.items()}}
        json.dump({{"hyps": hyps, "refs": refs, "figures": figures}}, open(sys.argv[1], "w"))
    """
)


@pytest.mark.train
def test_two_process_validation_counts_each_copy_sentence_once(tmp_path, quiet_trainer):
    """Two gloo processes on the CPU validate 9 sentences: Lightning's DistributedSampler gives
    each rank 5 (sentence 0 twice); BLEU, loss and token accuracy are those of the 9, as one
    process computes them."""
    script = tmp_path / "ddp_validate.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent)))
    out = tmp_path / "decoded.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, str(script), str(out)],
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
    )
    ddp = json.loads(out.read_text())

    dm = small_copy()
    model = untrained(dm)
    trainer = quiet_trainer()
    trainer.validate(model, datamodule=dm, verbose=False)
    hyps, refs = model.last_decoded["val"]
    assert refs == [dm.ids_to_text(dm.datasets["val"][i]) for i in range(9)]
    assert (ddp["hyps"], ddp["refs"]) == (hyps, refs)
    for name in (VAL_BLEU, VAL_LOSS, VAL_TOKEN_ACC):
        assert ddp["figures"][name] == pytest.approx(
            float(trainer.callback_metrics[name]), rel=1e-6
        ), name
    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score
    assert ddp["figures"][VAL_BLEU] == pytest.approx(bleu)
