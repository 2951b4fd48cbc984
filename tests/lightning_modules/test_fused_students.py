"""Fused students of the §3.1 objective (lightning_modules/distill.py): a group whose members have
their own teachers (or none), their own K and their own distill_weight (0 beside > 0) trains each
member as the member trains alone as a Seq2SeqModule student -- its own training_step (the
cross-entropy plus distill_weight times the term against its teacher's contexts), Lightning's
norm clipping and torch.optim.Adam, after its own setup("fit") (its teacher's encoder copied in
for init_from_teacher="encoder") -- to float32 tolerance: losses, the term, weights, gradients
and Adam's state. A member's checkpoint loads alone, its hparams naming its teacher."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from test_fused import (
    TOL,
    VOCAB,
    Unfused,
    assert_member_equals,
    make_batch,
    save_member_checkpoint,
)
from test_fused_axes import CLIPS, LRS, ROWS, WEIGHT_DECAY

from lightning_modules import Seq2SeqModule
from lightning_modules.distill import distillation_term
from lightning_modules.fused import FusedSeq2Seq, unfusable_reason

# a student's training_step logs train/loss and train/distill; alone, without a Trainer, the log
# is a warning and nothing else
pytestmark = pytest.mark.filterwarnings(r"ignore:You are trying to `self\.log\(\)`")

#: sizes of every model here: the students' memory vectors and the teachers' contexts both
#: 2 x 12 wide (bidirectional encoders of 12 units)
SIZES = dict(embedding_dim=8, hidden_size=12, dropout=0.0)
#: the teachers: two mechanisms, each a checkpoint of its own
TEACHERS = {"A": ("bahdanau", 10), "B": ("luong_general", 11)}
#: (K, max_source_len, distill_weight, teacher, init_from_teacher, position encoding) per member:
#: students of teacher A (K=4 and K=3 with PE and a shorter length: A's one pass serves both) and
#: of teacher B (K=7, started from B's encoder), a member with no teacher (K=1), and one started
#: from B's encoder without the term (distill_weight 0)
MEMBERS = [
    (4, 12, 0.5, "A", "none", False),
    (7, 12, 1.0, "B", "encoder", False),
    (1, 12, 0.0, None, "none", False),
    (3, 9, 2.0, "A", "none", True),
    (5, 12, 0.0, "B", "encoder", False),
]


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> dict[str, str]:
    """Each teacher as a Lightning checkpoint of a Seq2SeqModule (its own seed's weights)."""
    folder = tmp_path_factory.mktemp("teachers")
    paths = {}
    for name, (attention, seed) in TEACHERS.items():
        torch.manual_seed(seed)
        module = Seq2SeqModule(VOCAB, VOCAB, attention=attention, max_source_len=12, **SIZES)
        paths[name] = str(folder / f"{name}.ckpt")
        torch.save(
            {
                "pytorch-lightning_version": pl.__version__,
                "epoch": 0,
                "global_step": 0,
                "state_dict": module.state_dict(),
                "hyper_parameters": dict(module.hparams),
            },
            paths[name],
        )
    return paths


def student(member: int, teachers: dict[str, str]) -> Seq2SeqModule:
    """Member ``member`` as its own trial builds it: its seed, K, length, term and teacher."""
    K, length, weight, teacher, init, pe = MEMBERS[member]
    torch.manual_seed(member)
    return Seq2SeqModule(
        VOCAB,
        VOCAB,
        attention="memory",
        attention_kwargs={"K": K, "position_encoding": pe},
        max_source_len=length,
        lr=LRS[member],
        weight_decay=WEIGHT_DECAY[member],
        val_decode=False,
        distill_weight=weight,
        teacher_checkpoint=teachers[teacher] if teacher else None,
        init_from_teacher=init,
        **SIZES,
    )


class Student(Unfused):
    """One member trained alone as a student trains: ``setup("fit")`` first (its teacher loaded,
    its encoder copied in), then each step its own ``training_step`` (the loss with the term),
    backward, Lightning's norm clipping, Adam."""

    def __init__(self, module: Seq2SeqModule, clip: float | None) -> None:
        module.setup("fit")
        super().__init__(module, clip)

    def step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        self.optimizer.zero_grad()
        loss = self.module.training_step(batch, 0)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip)
        self.optimizer.step()
        return loss.detach()

    def term(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The member's §3.1 term on ``batch`` at its current weights, as its step computes it."""
        model, pad = self.module.model, self.module.hparams.pad_id
        tgt_in = model.shift_target(batch["tgt"])
        with torch.no_grad():
            _, cache, _ = model.forward_with_contexts(batch["src"], batch["src_lengths"], tgt_in)
            contexts = self.module.teacher().contexts(batch["src"], batch["src_lengths"], tgt_in)
        return distillation_term(cache["C"], contexts, (batch["tgt"] != pad).sum(1))


def students(teachers: dict[str, str], members: list[int]) -> tuple[FusedSeq2Seq, list[Student]]:
    fused = FusedSeq2Seq.from_modules(
        [student(m, teachers) for m in members], clip=[CLIPS[m] for m in members]
    )
    return fused, [Student(student(m, teachers), CLIPS[m]) for m in members]


def member_batches(step: int, members: list[int]) -> list[dict[str, torch.Tensor]]:
    """Each member's batch of ``step``: its own sentence count, lengths up to its own length."""
    return [make_batch(100 * step + m, ROWS[m], MEMBERS[m][1]) for m in members]


def train_both(fused: FusedSeq2Seq, refs: list[Student], steps: range, members: list[int]) -> None:
    for step in steps:
        batches = member_batches(step, members)
        terms = {i: refs[i].term(batches[i]) for i in fused.students}  # before the step
        losses = fused.train_step(batches)
        expected = torch.stack([ref.step(b) for ref, b in zip(refs, batches)])
        torch.testing.assert_close(losses, expected, **TOL, msg=f"losses at step {step}")
        for i, term in terms.items():
            torch.testing.assert_close(fused.last_distill[i], term, **TOL, msg=f"term {i}")


# ---------------------------------------------------------------- each member as alone
@pytest.mark.train
def test_students_of_different_teachers_and_k_train_as_each_trains_alone(teachers):
    """20 steps of the five members: each member's loss (with its term), then its weights,
    gradients and Adam state, are its unfused student's; a member without a term trains as
    the plain model does; the padded slots of the smaller K stay exactly 0."""
    members = list(range(len(MEMBERS)))
    fused, refs = students(teachers, members)
    assert fused.students == [0, 1, 3]
    assert len(fused._teachers) == 2, "one teacher per checkpoint, shared by its students"
    train_both(fused, refs, range(20), members)
    for i, ref in enumerate(refs):
        assert_member_equals(fused, i, ref)
    assert fused.last_distill[2] == 0 and fused.last_distill[4] == 0
    padding = fused.flat.padding()
    for name, buffer in fused.flat.buffers().items():
        assert torch.count_nonzero(buffer[padding]) == 0, f"padding moved in {name}"


def test_a_student_group_steps_as_its_members_alone(teachers):
    """The quick form of the test above: two steps of a student of each teacher beside a
    member without one."""
    members = [1, 2, 3]
    fused, refs = students(teachers, members)
    for step in range(2):
        train_both(fused, refs, range(step, step + 1), members)
        for i, ref in enumerate(refs):
            assert_member_equals(fused, i, ref)


def test_the_term_moves_the_students_and_only_them(teachers):
    """Without its term a student's step is another (its loss and weights differ from the same
    member's with distill_weight 0), and the term's gradient reaches only the students."""
    fused, _ = students(teachers, [0, 2])
    torch.manual_seed(0)
    plain = FusedSeq2Seq.from_modules(
        [Seq2SeqModule(**{**dict(student(0, teachers).hparams), "distill_weight": 0.0}),
         student(2, teachers)],
        clip=[CLIPS[0], CLIPS[2]],
    )  # fmt: skip
    plain.flat.data.copy_(fused.flat.data)
    batches = member_batches(0, [0, 2])
    losses, without = fused.train_step(batches), plain.train_step(batches)
    assert fused.last_distill[0] > 0
    torch.testing.assert_close(losses[0], without[0] + 0.5 * fused.last_distill[0], **TOL)
    assert torch.equal(losses[1], without[1]), "a member without a teacher: the plain loss"
    assert not torch.equal(fused.flat.data[0], plain.flat.data[0])
    assert torch.equal(fused.flat.data[1], plain.flat.data[1])


# ---------------------------------------------------------------- the start
def test_init_from_teacher_starts_each_member_where_its_setup_starts_it(teachers):
    """A member with init_from_teacher="encoder" starts with its teacher's encoder and target
    embeddings (what setup("fit") gives it alone), the others with their own weights; the
    global random stream is where it was (the teachers were loaded off it)."""
    modules = [student(m, teachers) for m in (0, 1, 4)]
    torch.manual_seed(123)
    fused = FusedSeq2Seq.from_modules(modules)
    after = torch.rand(1)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(1)), "loading the teachers drew from the global RNG"
    teacher_b = Seq2SeqModule.load_from_checkpoint(teachers["B"]).state_dict()
    for i, m in enumerate((0, 1, 4)):
        alone = student(m, teachers)
        alone.setup("fit")
        mine = fused.member_module(i).state_dict()
        assert all(torch.equal(mine[k], v) for k, v in alone.state_dict().items())
        encoder = [k for k in mine if k.startswith("model.encoder.")]
        assert encoder and all(
            torch.equal(mine[k], teacher_b[k]) == (MEMBERS[m][4] == "encoder") for k in encoder
        )


def test_a_student_and_its_teacher_of_another_memory_size_are_refused(teachers, tmp_path):
    """As setup("fit") refuses it alone: the student's memory vectors must be the teacher's
    contexts' size."""
    torch.manual_seed(0)
    wide = Seq2SeqModule(VOCAB, VOCAB, attention="bahdanau", embedding_dim=8, hidden_size=16)
    path = tmp_path / "wide.ckpt"
    torch.save(
        {"pytorch-lightning_version": pl.__version__, "epoch": 0, "global_step": 0,
         "state_dict": wide.state_dict(), "hyper_parameters": dict(wide.hparams)},
        path,
    )  # fmt: skip
    module = student(0, {**teachers, "A": str(path)})
    with pytest.raises(ValueError, match="D=24 but the teacher's contexts have D=32"):
        FusedSeq2Seq.from_modules([module, student(2, teachers)])


def test_students_fuse_and_hard_monotonic_still_does_not():
    base = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, attention="memory")
    assert unfusable_reason(dict(base, distill_weight=0.5, teacher_checkpoint="t.ckpt")) is None
    assert (
        unfusable_reason(dict(base, init_from_teacher="encoder", teacher_checkpoint="t.ckpt"))
        is None
    )
    hard = dict(base, attention="monotonic", attention_kwargs={"mode": "hard"})
    assert "mode='hard'" in unfusable_reason(hard)


# ---------------------------------------------------------------- each member a module of its own
def test_a_students_checkpoint_loads_alone_and_the_group_resumes_with_its_teachers(
    teachers, tmp_path
):
    """A member's checkpoint (Lightning's format, its Adam state) loads alone as a plain student,
    its hparams naming its teacher, and trains on as the group does; the group's state holds no
    teacher and, restored, loads the teachers again on its next step and goes on exactly."""
    members = [1, 2, 3]
    fused, refs = students(teachers, members)
    train_both(fused, refs, range(2), members)
    path = tmp_path / "member.ckpt"
    member = save_member_checkpoint(fused, 0, path, step=2)
    loaded = Seq2SeqModule.load_from_checkpoint(path, map_location="cpu")
    assert loaded.hparams.teacher_checkpoint == teachers["B"]
    assert loaded.hparams.distill_weight == 1.0 and loaded.hparams.init_from_teacher == "encoder"
    assert loaded.model.decoder.attention.K == 7
    alone = Student(loaded, CLIPS[1])  # its setup("fit") copies the encoder in: a resumed fit
    alone.module.load_state_dict(member.state_dict())  # restores the checkpoint over it
    alone.optimizer.load_state_dict(torch.load(path, weights_only=False)["optimizer_states"][0])
    state = fused.state_dict()
    assert not any("teacher" in k for k in state) and all(torch.is_tensor(state[k]) or k in (
        "version", "hparams", "member_ids", "clip", "steps", "precision") for k in state)  # fmt: skip
    resumed = FusedSeq2Seq.from_state_dict(state)
    assert resumed._teachers == {}, "teachers are loaded when the group trains, not restored"
    batches = member_batches(2, members)
    losses = fused.train_step(batches)
    assert torch.equal(resumed.train_step(batches), losses)
    assert torch.equal(resumed.flat.data, fused.flat.data)
    torch.testing.assert_close(alone.step(batches[0]), losses[0], **TOL)
    assert_member_equals(fused, 0, alone)


def test_keep_drops_a_student_and_its_teacher(teachers):
    """Dropping teacher B's only student lets B go; the others train on as alone."""
    members = [0, 1, 2]
    fused, refs = students(teachers, members)
    train_both(fused, refs, range(1), members)
    fused.keep([0, 2])
    assert fused.students == [0] and set(fused._teachers) == {teachers["A"]}
    kept = [refs[0], refs[2]]
    train_both(fused, kept, range(1, 2), [0, 2])
    for i, ref in enumerate(kept):
        assert_member_equals(fused, i, ref)
