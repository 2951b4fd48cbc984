"""The §3.1 objective (lightning_modules.distill): the mapping of memory rows to target steps,
the term's value on hand-computed cases, its gradient, the teacher's hooks in Seq2SeqModule, and
distill_weight = 0 giving the ordinary model to the last digit."""

from __future__ import annotations

import shutil

import lightning.pytorch as pl
import pytest
import torch

from datamodules import CopyTaskDataModule
from lightning_modules import Seq2SeqModule
from lightning_modules.distill import (
    Teacher,
    distillation_term,
    init_from_teacher,
    matched_steps,
)
from lightning_modules.metric_names import TRAIN_DISTILL, TRAIN_LOSS


def small_copy() -> CopyTaskDataModule:
    return CopyTaskDataModule(
        vocab_size=10, max_length=6, train_size=64, val_size=16, test_size=16, batch_size=16
    )


def student(dm: CopyTaskDataModule, **kwargs) -> Seq2SeqModule:
    return Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": 4},
        max_source_len=dm.max_source_len,
        lr=3e-3,
        **kwargs,
    )


@pytest.fixture(scope="module")
def teacher_ckpt(tmp_path_factory, quiet_trainer) -> str:
    """A Bahdanau model trained a few steps on the small copy task, saved as a checkpoint."""
    pl.seed_everything(1, verbose=False)
    dm = small_copy()
    model = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="bahdanau", lr=3e-3, val_decode=False
    )
    trainer = quiet_trainer(max_steps=3, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    path = tmp_path_factory.mktemp("teacher") / "teacher.ckpt"
    trainer.save_checkpoint(path)
    return str(path)


# -- the mapping and the term, by hand ----------------------------------------------------------


def test_rows_are_matched_to_steps_as_documented():
    steps, matched = matched_steps(3, torch.tensor([3, 5, 2]))
    # K = |T|: row k is step k; K < |T| (5): the middles of 3 equal stretches, floor((k+1/2)5/3);
    # K > |T| (2): rows 0 and 1 are steps 0 and 1, row 2 is free
    assert steps.tolist() == [[0, 1, 2], [0, 2, 4], [0, 1, 1]]
    assert matched.tolist() == [[True] * 3, [True] * 3, [True, True, False]]
    steps, matched = matched_steps(4, torch.tensor([21, 8]))
    assert steps.tolist() == [[2, 7, 13, 18], [1, 3, 5, 7]] and matched.all()


def test_rows_of_a_k_per_sentence_are_matched_as_each_k_alone():
    """A fused group's students of different K in one padded C: each sentence's rows are its own
    K's, the padded rows never matched, and a filler row (no target) matches nothing."""
    lengths = torch.tensor([[3, 5, 2], [9, 1, 0]])  # (members, sentences)
    own = torch.tensor([[3], [6]])  # (members, 1)
    steps, matched = matched_steps(own, lengths, rows=6)
    for m, K in enumerate((3, 6)):
        alone_steps, alone_matched = matched_steps(K, lengths[m].clamp(min=1))
        real = lengths[m] > 0
        assert torch.equal(steps[m, real, :K], alone_steps[real])
        assert torch.equal(matched[m, real, :K], alone_matched[real])
        assert not matched[m, :, K:].any() and not matched[m, ~real].any()
    with pytest.raises(ValueError, match="give rows"):
        matched_steps(own, lengths)


def test_the_term_on_a_hand_computed_case_with_k_equal_to_the_length():
    C = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])  # (1, K=2, D=2)
    contexts = torch.tensor(
        [[[0.0, 0.0], [0.0, 1.0], [5.0, 5.0]]]
    )  # (1, T=3, D=2): step 2 is padding
    # |T| = 2 = K: rows 0, 1 against steps 0, 1: distances 1 and 1, mean 1
    assert distillation_term(C, contexts, torch.tensor([2])).item() == pytest.approx(1.0)


def test_the_term_on_a_hand_computed_case_with_k_below_the_length():
    C = torch.tensor([[[1.0], [3.0]], [[0.0], [0.0]]])  # (2, K=2, D=1)
    contexts = torch.tensor(
        [[[0.0], [10.0], [0.0], [1.0], [0.0]], [[2.0], [0.0], [9.0], [9.0], [9.0]]]
    )  # (2, T=5, D=1)
    # sentence 0, |T| = 5 > K: rows matched to steps floor(5/4) = 1 and floor(15/4) = 3:
    # (1 - 10)^2 = 81 and (3 - 1)^2 = 4, mean 42.5; sentence 1, |T| = 1 < K: row 0 against step 0,
    # (0 - 2)^2 = 4, row 1 free (the padding's 9s never read); the batch's mean (42.5 + 4) / 2
    term = distillation_term(C, contexts, torch.tensor([5, 1]))
    assert term.item() == pytest.approx(23.25)


def test_memory_sizes_that_differ_fail_with_the_fix():
    with pytest.raises(ValueError, match="D=3 but the teacher's contexts have D=2"):
        distillation_term(torch.zeros(1, 2, 3), torch.zeros(1, 2, 2), torch.tensor([2]))


def test_the_gradient_reaches_c_and_the_student_encoder_but_not_the_teacher(teacher_ckpt):
    dm = small_copy()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    model = student(dm, distill_weight=1.0, teacher_checkpoint=teacher_ckpt).model
    teacher = Teacher.load(
        teacher_ckpt, lambda p: Seq2SeqModule.load_from_checkpoint(p, map_location="cpu").model
    )
    tgt_in = model.shift_target(batch["tgt"])
    _, cache, _ = model.forward_with_contexts(batch["src"], batch["src_lengths"], tgt_in)
    contexts = teacher.contexts(batch["src"], batch["src_lengths"], tgt_in)
    assert not contexts.requires_grad
    lengths = (batch["tgt"] != dm.pad_id).sum(1)
    distillation_term(cache["C"], contexts, lengths).backward()
    assert model.attention.W_alpha.weight.grad.abs().sum() > 0
    assert model.encoder.rnn.weight_ih_l0.grad.abs().sum() > 0
    assert model.attention.W_beta.weight.grad is None  # the decoder's scores do not make C
    assert all(p.grad is None for p in teacher.model.parameters())


def test_forward_with_contexts_gives_the_forward_logits_bit_for_bit():
    dm = small_copy()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    model = student(dm).model.eval()
    tgt_in = model.shift_target(batch["tgt"])
    logits, cache, contexts = model.forward_with_contexts(
        batch["src"], batch["src_lengths"], tgt_in
    )
    assert torch.equal(logits, model(batch["src"], batch["src_lengths"], tgt_in))
    assert contexts.shape == (*tgt_in.shape, model.decoder.context_dim)
    assert cache["C"].shape == (tgt_in.shape[0], 4, model.encoder.output_size)


# -- the module ---------------------------------------------------------------------------------


class LossLog(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def _train(module: Seq2SeqModule, quiet_trainer, steps: int = 4) -> list[float]:
    pl.seed_everything(0, verbose=False)
    log = LossLog()
    quiet_trainer(max_steps=steps, limit_val_batches=0, callbacks=[log]).fit(
        module, datamodule=small_copy()
    )
    return log.losses


def test_distill_weight_zero_is_the_ordinary_model_to_the_last_digit(teacher_ckpt, quiet_trainer):
    dm = small_copy()
    pl.seed_everything(0, verbose=False)
    ordinary = student(dm, dropout=0.2)
    pl.seed_everything(0, verbose=False)
    zero = student(dm, dropout=0.2, distill_weight=0.0, teacher_checkpoint=teacher_ckpt)
    losses = _train(ordinary, quiet_trainer), _train(zero, quiet_trainer)
    assert losses[0] == losses[1] and len(losses[0]) == 4
    for (name, a), (_, b) in zip(
        ordinary.state_dict().items(), zero.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert zero._teacher is None, "a teacher was loaded for distill_weight 0"


def test_a_student_trains_on_the_term_and_loads_without_its_teacher(
    teacher_ckpt, quiet_trainer, tmp_path
):
    dm = small_copy()
    copy = tmp_path / "teacher.ckpt"
    copy.write_bytes(open(teacher_ckpt, "rb").read())
    taught = student(dm, distill_weight=10.0, teacher_checkpoint=str(copy))
    trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(taught, datamodule=dm)
    assert float(trainer.callback_metrics[TRAIN_DISTILL]) > 0
    assert float(trainer.callback_metrics[TRAIN_LOSS]) > 10 * float(
        trainer.callback_metrics[TRAIN_DISTILL]
    )  # the cross-entropy plus the weighted term
    assert taught._teacher is not None
    assert not any("teacher" in k for k in taught.state_dict()), "the teacher is in the state dict"
    ckpt = tmp_path / "student.ckpt"
    trainer.save_checkpoint(ckpt)
    copy.unlink()  # the teacher is needed to train, not to load or decode
    loaded = Seq2SeqModule.load_from_checkpoint(ckpt, map_location="cpu").eval()
    assert loaded.hparams.teacher_checkpoint == str(copy) and loaded.hparams.distill_weight == 10
    batch = next(iter(dm.val_dataloader()))
    tokens, _ = loaded.model.greedy_decode(batch["src"], batch["src_lengths"], max_len=8)
    assert tokens.shape[0] == batch["src"].shape[0]
    with pytest.raises(FileNotFoundError, match="teacher checkpoint .*teacher.ckpt does not exist"):
        loaded.teacher()


def test_init_from_teacher_copies_the_encoder_and_embeddings_only(teacher_ckpt):
    dm = small_copy()
    module = student(dm, teacher_checkpoint=teacher_ckpt, init_from_teacher="encoder")
    rng = torch.get_rng_state()
    module.setup("fit")
    assert torch.equal(torch.get_rng_state(), rng), "loading the teacher drew random numbers"
    theirs = module.teacher().model.state_dict()
    mine = module.model.state_dict()
    assert torch.equal(mine["encoder.rnn.weight_ih_l0"], theirs["encoder.rnn.weight_ih_l0"])
    assert torch.equal(mine["encoder.bridge_h.weight"], theirs["encoder.bridge_h.weight"])
    assert torch.equal(mine["decoder.embedding.weight"], theirs["decoder.embedding.weight"])
    assert not torch.equal(mine["decoder.out.weight"], theirs["decoder.out.weight"])
    other = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="memory", hidden_size=16
    ).model
    with pytest.raises(ValueError, match="init_from_teacher: the student's encoder"):
        init_from_teacher(other, module.teacher().model, "encoder")


def test_a_trained_student_trains_on_from_its_own_encoder_not_the_teachers(
    teacher_ckpt, quiet_trainer, tmp_path
):
    """A student of init_from_teacher="encoder" loaded from its checkpoint (or fitted a second
    time) and trained further had its trained encoder replaced by the teacher's, without a word:
    setup("fit") copied it in at every fit."""
    dm = small_copy()
    taught = student(dm, teacher_checkpoint=teacher_ckpt, init_from_teacher="encoder")
    trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(taught, datamodule=dm)
    key = "encoder.rnn.weight_ih_l0"
    teachers = taught.teacher().model.state_dict()[key]
    trained = taught.model.state_dict()[key].clone()
    assert not torch.equal(trained, teachers), "two steps changed the copied encoder"
    ckpt = tmp_path / "student.ckpt"
    trainer.save_checkpoint(ckpt)

    loaded = Seq2SeqModule.load_from_checkpoint(ckpt, map_location="cpu")
    loaded.setup("fit")  # what the next fit does first
    assert torch.equal(loaded.model.state_dict()[key], trained)
    quiet_trainer(max_steps=0, limit_val_batches=0).fit(taught, datamodule=dm)  # a second fit
    assert torch.equal(taught.model.state_dict()[key], trained)
    # its teacher is wanted for nothing then (distill_weight 0): a fit needs no teacher file
    moved = tmp_path / "elsewhere.ckpt"
    shutil.copy(ckpt, moved)
    again = Seq2SeqModule.load_from_checkpoint(moved, teacher_checkpoint=str(tmp_path / "gone"))
    quiet_trainer(max_steps=1, limit_val_batches=0).fit(again, datamodule=dm)
    assert again.global_step == 1 and not torch.equal(again.model.state_dict()[key], teachers)


def test_configuration_errors_name_the_fix(teacher_ckpt):
    dm = small_copy()
    with pytest.raises(ValueError, match="attention 'bahdanau' has no C"):
        Seq2SeqModule(10, 10, attention="bahdanau", distill_weight=1.0, teacher_checkpoint="x")
    with pytest.raises(ValueError, match="need a teacher: pass teacher_checkpoint"):
        student(dm, distill_weight=1.0)
    with pytest.raises(ValueError, match="init_from_teacher='decoder' is not one of"):
        student(dm, init_from_teacher="decoder", teacher_checkpoint=teacher_ckpt)
    small = student(dm, hidden_size=16, distill_weight=1.0, teacher_checkpoint=teacher_ckpt)
    with pytest.raises(
        ValueError, match="memory vectors have D=32 but the teacher's contexts have D=128"
    ):
        small.setup("fit")


def test_a_fresh_student_given_longer_sources_is_told_to_build_for_them(
    teacher_ckpt, quiet_trainer
):
    """A student that starts from its teacher's encoder has no positions trained yet: the advice
    for longer data is a larger max_source_len, not the one for trained weights (filter)."""
    dm = small_copy()
    fresh = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": 4, "position_encoding": True},
        max_source_len=3,
        teacher_checkpoint=teacher_ckpt,
        init_from_teacher="encoder",
    )
    with pytest.raises(ValueError, match=f"pass max_source_len={dm.max_source_len} "):
        quiet_trainer(max_steps=1, limit_val_batches=0).fit(fresh, datamodule=dm)
