"""Fused trials (lightning_modules/fused): M members trained as one model give what M unfused
trainings give -- a plain Seq2SeqModule, torch.optim.Adam and clip_grad_norm_ per member, on the
same batches from the same initial weights -- to float32 tolerance; and each member stays a plain
module (weights, Adam state, checkpoints)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F

from lightning_modules import ATTENTION_REGISTRY, Seq2SeqModule
from lightning_modules.fused import FusedSeq2Seq, shape_key, unfusable_reason

VOCAB = 14
LR = (1e-2, 3e-3, 2e-2)
WEIGHT_DECAY = (0.0, 0.01, 0.0)
CLIP = (None, 1.0, 0.05)  # none, loose, tight enough to clip
SIZES = [(5, 7), (3, 11), (4, 4)]  # (sentences, longest) per member: different padded shapes
TOL = dict(rtol=1e-4, atol=5e-5)


def _memory_cases() -> list[tuple[str, dict]]:
    """Memory attention over its four scoring pairs, position encoding on and off, several K."""
    cases = []
    for i, (enc, dec) in enumerate(
        [
            ("softmax", "softmax"),
            ("softmax", "sigmoid"),
            ("sigmoid", "softmax"),
            ("sigmoid", "sigmoid"),
        ]
    ):
        for pe in (False, True):
            options = dict(K=(1, 4, 6)[i % 3], encoder_scoring=enc, decoder_scoring=dec)
            cases.append(("memory", dict(options, position_encoding=pe)))
    cases.append(("memory", dict(K=3, encoder_normalization="S", position_encoding=True,
                                 position_encoding_normalization="none", bias=True)))  # fmt: skip
    return cases


# every registered mechanism with its defaults, then memory attention's variants; monotonic's
# pre-sigmoid noise is a random draw like dropout, so the exact comparison switches it off
CASES = [
    (name, {"sigmoid_noise": 0.0} if name == "monotonic" else {})
    for name in sorted(ATTENTION_REGISTRY)
]
CASES += _memory_cases()
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items())}" for name, options in CASES]


def make_module(attention: str, options: dict, member: int, **sizes) -> Seq2SeqModule:
    torch.manual_seed(member)
    if ATTENTION_REGISTRY[attention].equal_sizes:
        sizes.setdefault("bidirectional", False)
    sizes.setdefault("dropout", 0.0)
    return Seq2SeqModule(
        VOCAB,
        VOCAB,
        attention=attention,
        attention_kwargs=options,
        max_source_len=12,
        embedding_dim=8,
        hidden_size=12,
        lr=LR[member],
        weight_decay=WEIGHT_DECAY[member],
        val_decode=False,
        **sizes,
    )


def make_batch(seed: int, sentences: int, longest: int) -> dict[str, torch.Tensor]:
    """A copy-task batch as the datamodule makes it: symbols then EOS, right-padded."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest + 1, (sentences,), generator=g)
    lengths[sentences // 2] = longest
    src = torch.zeros(sentences, longest, dtype=torch.long)
    for row, n in enumerate(lengths.tolist()):
        src[row, : n - 1] = torch.randint(4, VOCAB, (n - 1,), generator=g)
        src[row, n - 1] = 2  # EOS
    return {"src": src, "src_lengths": lengths, "tgt": src.clone(), "tgt_lengths": lengths.clone()}


def batches_for(step: int, members: Sequence[int]) -> list[dict[str, torch.Tensor]]:
    return [make_batch(10 * step + m, *SIZES[m]) for m in members]


class Unfused:
    """One member trained as a sweep trains it: the module's loss, backward, Lightning's norm
    clipping (``clip_grad_norm_``), torch.optim.Adam from configure_optimizers."""

    def __init__(self, module: Seq2SeqModule, clip: float | None) -> None:
        self.module, self.clip = module.train(), clip
        self.optimizer = module.configure_optimizers()

    def step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        self.optimizer.zero_grad()
        model = self.module.model
        logits = model(batch["src"], batch["src_lengths"], model.shift_target(batch["tgt"]))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["tgt"].reshape(-1),
                               ignore_index=self.module.hparams.pad_id)  # fmt: skip
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip)
        self.optimizer.step()
        return loss.detach()


def save_member_checkpoint(fused: FusedSeq2Seq, i: int, path, step: int) -> Seq2SeqModule:
    """Member ``i`` of ``fused`` written as Lightning writes a trial's checkpoint (its weights,
    hyperparameters and Adam state) at ``step``; returns the member's plain module."""
    member = fused.member_module(i)
    torch.save(
        {
            "pytorch-lightning_version": pl.__version__,
            "epoch": 0,
            "global_step": step,
            "state_dict": member.state_dict(),
            "hyper_parameters": dict(member.hparams),
            "optimizer_states": [fused.optimizer_state(i)],
        },
        path,
    )
    return member


def assert_member_equals(fused: FusedSeq2Seq, i: int, ref: Unfused, grads: bool = True) -> None:
    weights = fused.member_module(i).state_dict()
    for name, param in ref.module.named_parameters():
        torch.testing.assert_close(weights[name], param.detach(), **TOL, msg=f"weight {name}")
    if grads:
        fused_grads = fused.member_gradients(i)
        for name, param in ref.module.named_parameters():
            torch.testing.assert_close(fused_grads[name], param.grad, **TOL, msg=f"grad {name}")
    mine, theirs = fused.optimizer_state(i), ref.optimizer.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    assert mine["state"].keys() == theirs["state"].keys()
    for index, state in theirs["state"].items():
        assert torch.equal(mine["state"][index]["step"], state["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(mine["state"][index][key], state[key], **TOL, msg=key)


def fused_and_unfused(attention: str, options: dict, **sizes) -> tuple[FusedSeq2Seq, list[Unfused]]:
    members = [make_module(attention, options, m, **sizes) for m in range(3)]
    fused = FusedSeq2Seq.from_modules(members, clip=list(CLIP))
    refs = [Unfused(make_module(attention, options, m, **sizes), CLIP[m]) for m in range(3)]
    return fused, refs


@pytest.mark.parametrize("attention, options", CASES, ids=IDS)
def test_fused_steps_equal_unfused_steps(attention, options):
    fused, refs = fused_and_unfused(attention, options)
    for step in range(2):
        batches = batches_for(step, range(3))
        losses = fused.train_step(batches)
        expected = torch.stack([ref.step(b) for ref, b in zip(refs, batches)])
        torch.testing.assert_close(losses, expected, **TOL)
        for i, ref in enumerate(refs):
            assert_member_equals(fused, i, ref)


@pytest.mark.parametrize(
    "attention, sizes",
    [("memory", dict(encoder_layers=2, decoder_layers=2)),
     ("bahdanau", dict(encoder_layers=3, decoder_layers=2, bidirectional=False)),
     ("local_p", dict(encoder_layers=1, decoder_layers=3))],
)  # fmt: skip
def test_deeper_and_unidirectional_models_fuse_exactly(attention, sizes):
    fused, refs = fused_and_unfused(attention, {}, **sizes)
    batches = batches_for(0, range(3))
    torch.testing.assert_close(
        fused.train_step(batches), torch.stack([r.step(b) for r, b in zip(refs, batches)]), **TOL
    )
    for i, ref in enumerate(refs):
        assert_member_equals(fused, i, ref)


def test_member_module_round_trips_the_originals():
    members = [make_module("memory", {"K": 4}, m) for m in range(3)]
    fused = FusedSeq2Seq.from_modules(members)
    for i, original in enumerate(members):
        copy = fused.member_module(i)
        assert type(copy) is Seq2SeqModule and not copy.training
        assert dict(copy.hparams) == dict(original.hparams)
        mine, theirs = copy.state_dict(), original.state_dict()
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    # a copy: training the group does not change a module handed out before
    before = fused.member_module(0).state_dict()
    fused.train_step(batches_for(0, range(3)))
    assert all(torch.equal(before[k], members[0].state_dict()[k]) for k in before)


def test_keep_drops_members_and_the_rest_train_on_exactly():
    fused, refs = fused_and_unfused("bahdanau", {})
    batches = batches_for(0, range(3))
    fused.train_step(batches)
    for ref, batch in zip(refs, batches):
        ref.step(batch)
    fused.keep([2, 0])
    assert fused.member_ids == [2, 0] and fused.members == 2
    assert fused.flat.data.shape[0] == 2  # the dropped member costs nothing any more
    kept = [refs[2], refs[0]]
    batches = batches_for(1, [2, 0])
    torch.testing.assert_close(
        fused.train_step(batches), torch.stack([r.step(b) for r, b in zip(kept, batches)]), **TOL
    )
    for i, ref in enumerate(kept):
        assert_member_equals(fused, i, ref)
    with pytest.raises(ValueError, match="distinct member indices"):
        fused.keep([0, 0])


def test_state_dict_round_trip_resumes_the_group_exactly():
    members = [make_module("monotonic", {"sigmoid_noise": 0.0}, m) for m in range(3)]
    fused = FusedSeq2Seq.from_modules(members, clip=list(CLIP))
    fused.train_step(batches_for(0, range(3)))
    fused.keep([0, 2])
    buffer = io.BytesIO()
    torch.save(fused.state_dict(), buffer)
    buffer.seek(0)
    resumed = FusedSeq2Seq.from_state_dict(torch.load(buffer, weights_only=False))
    assert resumed.member_ids == [0, 2] and resumed.steps == fused.steps
    batches = batches_for(1, [0, 2])
    assert torch.equal(resumed.train_step(batches), fused.train_step(batches))
    assert torch.equal(resumed.flat.data, fused.flat.data)
    assert torch.equal(resumed.flat.exp_avg_sq, fused.flat.exp_avg_sq)


def test_a_member_checkpoint_loads_alone_and_resumes_as_an_unfused_trial(tmp_path):
    fused, refs = fused_and_unfused("memory", {"K": 4, "position_encoding": True})
    for step in range(2):
        fused.train_step(batches_for(step, range(3)))
    path = tmp_path / "member1.ckpt"
    member = save_member_checkpoint(fused, 1, path, step=2)
    loaded = Seq2SeqModule.load_from_checkpoint(path, map_location="cpu")
    assert dict(loaded.hparams) == dict(member.hparams)
    assert all(torch.equal(v, member.state_dict()[k]) for k, v in loaded.state_dict().items())
    # the unfused resume: its Adam state loads and its next step is the fused member's next step
    resume = Unfused(loaded, CLIP[1])
    resume.optimizer.load_state_dict(torch.load(path, weights_only=False)["optimizer_states"][0])
    batches = batches_for(2, range(3))
    losses = fused.train_step(batches)
    torch.testing.assert_close(resume.step(batches[1]), losses[1], **TOL)
    assert_member_equals(fused, 1, resume)
    # and an unfused optimiser's state loads into a member
    fused.load_optimizer_state(1, resume.optimizer.state_dict())
    assert fused.steps[1] == 3


@pytest.mark.parametrize("length", [0, 13])
def test_a_member_batch_with_a_bad_length_is_refused_as_the_unfused_model_refuses_it(length):
    """A length of 0 read the sentence's last step, one past the row's width the next
    sentence's (even the next member's) embeddings: a loss, no error."""
    fused, _ = fused_and_unfused("memory", {"K": 4})
    batches = batches_for(0, range(3))
    batches[1]["src_lengths"][0] = length
    with pytest.raises(
        ValueError, match=rf"^member 1's batch: src_lengths must .* length of {length}"
    ):
        fused.train_step(batches)


def test_shape_key_names_what_fuses():
    base = dict(src_vocab_size=24, tgt_vocab_size=24, attention="memory", attention_kwargs={"K": 16},
                max_source_len=11)  # fmt: skip
    same = [dict(base, lr=1e-3, weight_decay=0.1, dropout=0.3, val_beam_size=10),
            dict(base, preset="tiny", hidden_size=64, attention_kwargs={"K": 16, "bias": False})]  # fmt: skip
    assert {shape_key(h) for h in [base, *same]} == {shape_key(base)}
    hash(shape_key(base))
    # (K and max_source_len are member axes, test_fused_axes.py: they fuse)
    for change in ({"attention_kwargs": {"K": 16, "bias": True}}, {"hidden_size": 32},
                   {"tgt_vocab_size": 25}, {"attention": "bahdanau"}, {"bidirectional": False}):  # fmt: skip
        assert shape_key(dict(base, **change)) != shape_key(base), change
    with pytest.raises(ValueError, match="not Seq2SeqModule arguments"):
        shape_key(dict(base, K=16))
    assert unfusable_reason(base) is None
    assert "hard" in unfusable_reason(
        dict(base, attention="monotonic", attention_kwargs={"mode": "hard"})
    )
    # (a teacher's student fuses, with its teacher pass: test_fused_students.py)


def test_from_modules_names_the_differing_setting():
    a = make_module("memory", {"K": 4}, 0)
    b = make_module("memory", {"K": 6, "bias": True}, 1)
    with pytest.raises(ValueError, match=r"attention_kwargs\.bias: False != True"):
        FusedSeq2Seq.from_modules([a, b])


def test_per_member_dropout_draws_its_own_masks():
    """With dropout, members differ only by their masks: a member with p = 0 trains exactly as
    unfused beside members with dropout, and the members with dropout get other masks each."""
    members = [make_module("bahdanau", {}, m, dropout=p) for m, p in enumerate((0.0, 0.5, 0.3))]
    fused = FusedSeq2Seq.from_modules(members)
    ref = Unfused(make_module("bahdanau", {}, 0), None)
    batches = batches_for(0, range(3))
    torch.manual_seed(0)
    losses = fused.train_step(batches)
    torch.testing.assert_close(losses[0], ref.step(batches[0]), **TOL)
    assert fused.member_module(1).hparams.dropout == 0.5
    no_dropout = Unfused(make_module("bahdanau", {}, 1), None).step(batches[1])
    assert not torch.isclose(losses[1], no_dropout)


def test_bf16_autocast_trains_on_cpu():
    members = [make_module("memory", {"K": 4}, m) for m in range(2)]
    fused = FusedSeq2Seq.from_modules(members, precision="bf16-mixed")
    before = fused.flat.data.clone()
    losses = fused.train_step(batches_for(0, range(2)))
    assert losses.dtype == torch.float32 and torch.isfinite(losses).all()
    assert fused.flat.data.dtype == torch.float32 and not torch.equal(fused.flat.data, before)
