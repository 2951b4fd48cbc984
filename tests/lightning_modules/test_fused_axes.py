"""Fused members that differ along the member axes (lightning_modules/fused/axes.py): memory
attention's K, scoring pair, position encoding and the length each member was built for (with
batches of its own lengths), and the other mechanisms' per-member options. Each member trains as
it trains alone -- a plain Seq2SeqModule, torch.optim.Adam and clip_grad_norm_, from the same
initial weights on the same batches -- to float32 tolerance; the padding of a smaller member
stays exactly 0 (weights, gradients, Adam's moments, under weight decay); and each member stays
a plain module of its own K and length (checkpoints, Adam state, the group's state dict, keep)."""

from __future__ import annotations

import io
import subprocess
import sys

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

from lightning_modules import ATTENTION_REGISTRY, Seq2SeqModule
from lightning_modules.attention import attention_options
from lightning_modules.attention.memory import MemoryAttention
from lightning_modules.fused import (
    FusedSeq2Seq,
    axes,
    key,
    member_axes,
    padded_axes,
    shape_difference,
    shape_key,
)
from lightning_modules.fused.memory import FusedMemoryAttention

LRS = (
    2e-3,
    1e-3,
    3e-3,
    1.5e-3,
    2.5e-3,
)  # sweep-like rates: Adam amplifies rounding at ~0 gradients by lr / eps
WEIGHT_DECAY = (0.0, 0.01, 0.0, 0.02, 0.01)
CLIPS = (None, 1.0, 0.05, 0.5, None)
ROWS = (4, 3, 5, 4, 2)  # sentences per batch, per member
#: sizes of the quick tests (the 50-step ones train the tiny preset)
SMALL = dict(embedding_dim=8, hidden_size=12)

# (max_source_len, memory attention options) per member; the batches of a member are at most
# its max_source_len long, so members built for different lengths see different lengths
SCORING = [("softmax", "softmax"), ("softmax", "sigmoid"), ("sigmoid", "softmax"),
           ("sigmoid", "sigmoid")]  # fmt: skip
PE = dict(position_encoding=True)
GROUPS: dict[str, list[tuple[int, dict]]] = {
    "K": [(12, dict(K=1)), (12, dict(K=4)), (12, dict(K=7))],
    "scoring": [(12, dict(K=4, encoder_scoring=e, decoder_scoring=d)) for e, d in SCORING],
    "pe": [
        (12, dict(K=4)),
        (12, dict(K=4, **PE)),
        (12, dict(K=4, position_encoding_normalization="none", **PE)),
    ],  # fmt: skip
    "length": [(6, dict(K=4, **PE)), (9, dict(K=4, **PE)), (12, dict(K=4, **PE))],
    "mix": [
        (6, dict(K=1)),
        (12, dict(K=7, encoder_scoring="sigmoid", **PE)),
        (9, dict(K=3, encoder_normalization="S", decoder_scoring="sigmoid", **PE)),
        (
            12,
            dict(
                K=4,
                encoder_scoring="sigmoid",
                decoder_scoring="sigmoid",
                position_encoding_normalization="none",
                **PE,
            ),
        ),  # fmt: skip
        (8, dict(K=5, encoder_normalization="S")),
    ],
}


def memory_member(
    member: int, length: int, options: dict, weight_decay: bool = True, **sizes
) -> Seq2SeqModule:
    """Member ``member`` as its own trial builds it: its seed, its options and length (the tiny
    preset unless ``sizes`` override it)."""
    torch.manual_seed(member)
    return Seq2SeqModule(
        VOCAB,
        VOCAB,
        attention="memory",
        attention_kwargs=options,
        preset="tiny",
        dropout=0.0,
        max_source_len=length,
        lr=LRS[member],
        weight_decay=WEIGHT_DECAY[member] if weight_decay else 0.0,
        val_decode=False,
        **sizes,
    )


def group(name: str, weight_decay: bool = True, **sizes) -> tuple[FusedSeq2Seq, list[Unfused]]:
    """The fused group ``GROUPS[name]`` and each member's unfused twin."""
    spec = GROUPS[name]
    build = lambda m, L, o: memory_member(m, L, o, weight_decay, **sizes)  # noqa: E731
    fused = FusedSeq2Seq.from_modules(
        [build(m, L, o) for m, (L, o) in enumerate(spec)], clip=list(CLIPS[: len(spec)])
    )
    refs = [Unfused(build(m, L, o), CLIPS[m]) for m, (L, o) in enumerate(spec)]
    return fused, refs


def group_batches(name: str, step: int, members: list[int] | None = None) -> list[dict]:
    """Each member's batch of ``step``: its own sentence count and lengths (up to its length)."""
    spec = GROUPS[name]
    members = range(len(spec)) if members is None else members
    return [make_batch(100 * step + m, ROWS[m], spec[m][0]) for m in members]


def train_both(
    fused: FusedSeq2Seq, refs: list[Unfused], name: str, steps: range, members=None
) -> None:
    """``steps`` steps of the group and of each member alone: the same losses each step."""
    for step in steps:
        batches = group_batches(name, step, members)
        losses = fused.train_step(batches)
        expected = torch.stack([ref.step(b) for ref, b in zip(refs, batches)])
        torch.testing.assert_close(losses, expected, **TOL, msg=f"losses at step {step}")


def assert_padding_is_zero(fused: FusedSeq2Seq) -> None:
    padding = fused.flat.padding()
    assert padding is not None and padding.any(), "the group has padded weights"
    for name, buffer in fused.flat.buffers().items():
        assert torch.count_nonzero(buffer[padding]) == 0, f"padding moved in {name}"


# ---------------------------------------------------------------- each member as alone
@pytest.mark.train
@pytest.mark.parametrize("name", list(GROUPS))
def test_members_that_differ_along_an_axis_train_as_they_train_alone(name):
    """50 steps of a group whose members differ in K, scoring, PE, length, or all four: each
    member's losses, then its weights, gradients and Adam state, are its unfused run's.

    Without weight decay: where a gradient and the decay term cancel to about Adam's eps, its
    update magnifies their rounding by lr / eps, and two float32 summation orders then part
    weights by up to 1e-4 (the 3-step tests below keep the decay on)."""
    fused, refs = group(name, weight_decay=False)
    assert isinstance(fused.decoder.attention, FusedMemoryAttention)
    train_both(fused, refs, name, range(50))
    for i, ref in enumerate(refs):
        assert_member_equals(fused, i, ref)
    if name in ("K", "mix"):
        assert_padding_is_zero(fused)


@pytest.mark.train
def test_a_mixed_group_steps_as_its_members_alone():
    """The quick form of the test above, with weight decay, for the group that mixes all four
    axes (3 steps, small sizes)."""
    fused, refs = group("mix", **SMALL)
    for step in range(3):
        train_both(fused, refs, "mix", range(step, step + 1))
        for i, ref in enumerate(refs):
            assert_member_equals(fused, i, ref)


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_padding_stays_exactly_zero_and_every_gradient_finite():
    """K padded from 1, 3, 4 and 5 to 7 under all three encoder functions and both decoder
    functions, with weight decay: the padded weights, their gradients and Adam's moments stay
    exactly 0, and no NaN appears forward or backward (anomaly mode raises on one)."""
    fused, _ = group("mix", **SMALL)
    assert fused.decoder.attention.K == 7 and set(fused.decoder.attention.encoder_kinds) == {
        "softmax_K",
        "softmax_S",
        "sigmoid",
    }
    for step in range(2):
        with torch.autograd.detect_anomaly():
            losses = fused.train_step(group_batches("mix", step))
        assert torch.isfinite(losses).all()
        assert torch.isfinite(fused.flat.grad).all() and torch.isfinite(fused.flat.data).all()
        assert_padding_is_zero(fused)
    # the mechanism's own output: each member's alpha and beta are 0 at its padded slots
    attention = fused.decoder.attention
    batches = group_batches("mix", 9)
    src, lengths, tgt = fused._stack(batches)
    with torch.no_grad():
        memory, mask, state = fused.encoder(src, lengths)
        cache = attention.precompute(memory.flatten(0, 1), mask.flatten(0, 1))
        beta = attention._beta(state[0][-1].flatten(0, 1))
    M, B = src.shape[:2]
    padded = ~attention.slots  # (M, K)
    assert torch.all(cache["alpha"].view(M, B, -1, 7).masked_select(padded[:, None, None]) == 0)
    assert torch.all(beta.view(M, B, 7).masked_select(padded[:, None]) == 0)
    assert torch.all(cache["C"].view(M, B, 7, -1).masked_select(padded[:, None, :, None]) == 0)


def test_a_mixed_group_trains_under_bf16_autocast():
    """The fills are the bf16 minimum there: still finite, the padding still exactly 0."""
    members = [memory_member(m, L, o, **SMALL) for m, (L, o) in enumerate(GROUPS["mix"])]
    fused = FusedSeq2Seq.from_modules(members, precision="bf16-mixed")
    for step in range(2):
        assert torch.isfinite(fused.train_step(group_batches("mix", step))).all()
    assert torch.isfinite(fused.flat.grad).all()
    assert_padding_is_zero(fused)


def test_a_member_longer_than_its_length_is_refused():
    fused, _ = group("length", **SMALL)
    batches = group_batches("length", 0)
    batches[0] = make_batch(0, 3, 9)  # member 0 was built for 6 positions
    with pytest.raises(ValueError, match="member 0's batch has 9 source positions.*=6"):
        fused.train_step(batches)


# ---------------------------------------------------------------- each member a module of its own
def test_a_mixed_members_checkpoint_loads_alone_with_its_own_K_and_length(tmp_path):
    """A member's checkpoint as the sweep writes it (Lightning's format, its Adam state) loads
    alone as a plain Seq2SeqModule of its own K and length, and resumes as the group goes on."""
    fused, refs = group("mix", **SMALL)
    train_both(fused, refs, "mix", range(3))
    resumes = {}
    for i in (0, 2):  # K=1 without PE, built for 6; K=3 with PE, built for 9
        length, options = GROUPS["mix"][i]
        path = tmp_path / f"member{i}.ckpt"
        member = save_member_checkpoint(fused, i, path, step=3)
        loaded = Seq2SeqModule.load_from_checkpoint(path, map_location="cpu")
        attention = loaded.model.decoder.attention
        assert type(attention) is MemoryAttention and attention.K == options["K"]
        assert attention.W_alpha.weight.shape[0] == options["K"]
        assert attention.max_source_len == length
        if options.get("position_encoding"):
            assert attention.pe.shape == (options["K"], length)
        assert all(torch.equal(v, member.state_dict()[k]) for k, v in loaded.state_dict().items())
        for name, param in refs[i].module.named_parameters():
            torch.testing.assert_close(loaded.state_dict()[name], param.detach(), **TOL)
        resumes[i] = Unfused(loaded, CLIPS[i])
        state = torch.load(path, weights_only=False)["optimizer_states"][0]
        resumes[i].optimizer.load_state_dict(state)
    batches = group_batches("mix", 3)
    losses = fused.train_step(batches)
    for i, resume in resumes.items():
        torch.testing.assert_close(resume.step(batches[i]), losses[i], **TOL)
        assert_member_equals(fused, i, resume)
        fused.load_optimizer_state(i, resume.optimizer.state_dict())  # its own shapes load back
        assert fused.steps[i] == 4
        assert_member_equals(fused, i, resume, grads=False)
    assert_padding_is_zero(fused)


def test_state_dict_round_trip_of_a_mixed_group_is_exact():
    fused, _ = group("mix", **SMALL)
    for step in range(2):
        fused.train_step(group_batches("mix", step))
    buffer = io.BytesIO()
    torch.save(fused.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    assert state["version"] == 2
    resumed = FusedSeq2Seq.from_state_dict(state)
    assert [h["attention_kwargs"] for h in resumed.hparams] == [o for _, o in GROUPS["mix"]]
    for name, t in fused.flat.buffers().items():
        if name != "grad":
            assert torch.equal(resumed.flat.buffers()[name], t), name
    batches = group_batches("mix", 2)
    assert torch.equal(resumed.train_step(batches), fused.train_step(batches))
    assert torch.equal(resumed.flat.data, fused.flat.data)
    assert torch.equal(resumed.flat.exp_avg_sq, fused.flat.exp_avg_sq)
    for i in range(fused.members):
        mine, theirs = resumed.member_module(i).state_dict(), fused.member_module(i).state_dict()
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_state_versions():
    """Version 1 (a group of one shape, whose layout is unchanged) still loads; others raise."""
    fused, _ = group("K", **SMALL)
    fused.train_step(group_batches("K", 0))
    state = fused.state_dict()
    with pytest.raises(ValueError, match="fused state version 99; this code reads versions 1, 2"):
        FusedSeq2Seq.from_state_dict(dict(state, version=99))
    one_shape = FusedSeq2Seq.from_modules(
        [memory_member(m, 12, dict(K=4), **SMALL) for m in range(2)]
    )
    old = dict(one_shape.state_dict(), version=1)
    assert torch.equal(FusedSeq2Seq.from_state_dict(old).flat.data, one_shape.flat.data)
    bad = dict(state, data=state["data"][:, :-1])
    with pytest.raises(ValueError, match="not written by FusedSeq2Seq.state_dict"):
        FusedSeq2Seq.from_state_dict(bad)


def test_keep_repads_a_mixed_group_to_the_members_kept():
    """Dropping the K=7 member shrinks the padding to the largest K left (K=5), dropping all but
    one signature gives the plain mechanism; the kept members train on as they train alone."""
    fused, refs = group("mix", **SMALL)
    train_both(fused, refs, "mix", range(1))
    size = fused.flat.size
    fused.keep([4, 0, 2])
    assert fused.member_ids == [4, 0, 2] and fused.members == 3
    assert fused.decoder.attention.K == 5 and fused.flat.size < size
    kept = [refs[4], refs[0], refs[2]]
    for i, ref in enumerate(kept):
        assert_member_equals(fused, i, ref)
    train_both(fused, kept, "mix", range(1, 3), [4, 0, 2])
    for i, ref in enumerate(kept):
        assert_member_equals(fused, i, ref)
    assert_padding_is_zero(fused)
    fused.keep([1])
    assert type(fused.decoder.attention) is MemoryAttention and fused.flat.padding() is None
    train_both(fused, [kept[1]], "mix", range(3, 4), [0])
    assert_member_equals(fused, 0, kept[1])


# ---------------------------------------------------------------- the other mechanisms
def small_member(member: int, attention: str, length: int, options: dict) -> Seq2SeqModule:
    torch.manual_seed(member)
    return Seq2SeqModule(
        VOCAB,
        VOCAB,
        attention=attention,
        attention_kwargs=options,
        dropout=0.0,
        max_source_len=length,
        lr=LRS[member],
        weight_decay=WEIGHT_DECAY[member],
        val_decode=False,
        **SMALL,
    )


OTHER_GROUPS = {
    "luong_location": [(6, {}), (12, {}), (9, {})],
    "key_value": [(12, dict(scaled=True)), (12, {}), (7, dict(scaled=True))],
    "local_m": [(12, dict(window=1)), (12, dict(window=3)), (8, {})],
    "local_p": [(12, dict(window=1)), (12, dict(window=3)), (8, {})],
    "monotonic": [
        (12, dict(sigmoid_noise=0.0, score_bias_init=-1.0)),
        (12, dict(sigmoid_noise=0.0, scan_chunk=3)),
        (8, dict(sigmoid_noise=0.0)),
    ],  # fmt: skip
    "bahdanau": [(12, {}), (5, {}), (9, {})],
}


@pytest.mark.parametrize("attention", list(OTHER_GROUPS))
def test_other_mechanisms_members_with_their_own_options_train_as_alone(attention):
    spec = OTHER_GROUPS[attention]
    members = [small_member(m, attention, L, o) for m, (L, o) in enumerate(spec)]
    fused = FusedSeq2Seq.from_modules(members, clip=list(CLIPS[:3]))
    refs = [Unfused(small_member(m, attention, L, o), CLIPS[m]) for m, (L, o) in enumerate(spec)]
    batches = [make_batch(m, ROWS[m], L) for m, (L, _) in enumerate(spec)]  # each its own length
    torch.testing.assert_close(
        fused.train_step(batches), torch.stack([r.step(b) for r, b in zip(refs, batches)]), **TOL
    )
    for i, ref in enumerate(refs):  # weights, gradients and Adam state after the step
        assert_member_equals(fused, i, ref)
    if attention == "luong_location":  # W_a padded to 12 positions; the padding never moves
        assert_padding_is_zero(fused)
    for i, (length, options) in enumerate(spec):
        module = fused.member_module(i)
        assert module.hparams.max_source_len == length
        assert all(getattr(module.model.decoder.attention, k) == v for k, v in options.items()
                   if k not in ("scaled", "score_bias_init"))  # fmt: skip


def test_monotonic_members_draw_their_own_noise_scale():
    """A member without pre-sigmoid noise trains exactly as alone beside one with noise, which
    gets noise (its loss is not its noise-free run's)."""
    spec = [(12, dict(sigmoid_noise=0.0)), (12, dict(sigmoid_noise=2.0))]
    fused = FusedSeq2Seq.from_modules(
        [small_member(m, "monotonic", L, o) for m, (L, o) in enumerate(spec)]
    )
    quiet = Unfused(small_member(0, "monotonic", 12, dict(sigmoid_noise=0.0)), None)
    noiseless = Unfused(small_member(1, "monotonic", 12, dict(sigmoid_noise=0.0)), None)
    batches = [make_batch(m, ROWS[m], 12) for m in range(2)]
    torch.manual_seed(0)
    losses = fused.train_step(batches)
    torch.testing.assert_close(losses[0], quiet.step(batches[0]), **TOL)
    assert not torch.isclose(losses[1], noiseless.step(batches[1]))


# ---------------------------------------------------------------- the key and the lists
def test_the_group_key_leaves_the_member_axes_out():
    base = dict(src_vocab_size=24, tgt_vocab_size=24, attention="memory", max_source_len=11)
    members = [dict(base, attention_kwargs=o, max_source_len=L) for L, o in GROUPS["mix"]]
    assert len({shape_key(h) for h in [base, *members]}) == 1
    assert shape_difference(members[0], members[1]) == []
    assert member_axes(members[2]) == {
        "max_source_len": 9,
        "attention_kwargs.K": 3,
        "attention_kwargs.encoder_scoring": "softmax",
        "attention_kwargs.decoder_scoring": "sigmoid",
        "attention_kwargs.encoder_normalization": "S",
        "attention_kwargs.position_encoding": True,
        "attention_kwargs.position_encoding_normalization": "sentence",
        "attention_kwargs.max_source_len": 9,
    }
    group_axes = padded_axes(members)
    assert group_axes["attention_kwargs.K"] == 7  # padded to the largest
    assert group_axes["attention_kwargs.encoder_scoring"] == ("sigmoid", "softmax")  # both
    assert group_axes["max_source_len"] == (6, 8, 9, 12)
    # what still splits groups: a shape no padding covers, or a non-member option
    for change in ({"attention_kwargs": {"K": 4, "bias": True}}, {"hidden_size": 32}):
        assert shape_key(dict(base, **change)) != shape_key(base)
    with pytest.raises(ValueError, match="do not fuse.*hidden_size"):
        padded_axes([base, dict(base, hidden_size=32)])
    # luong_location pads its length; bahdanau's max_source_len changes nothing; key_value's
    # key_dim is a shape and stays in the key
    assert member_axes(dict(base, attention="bahdanau")) == {"max_source_len": 11}
    assert padded_axes([dict(base, attention="luong_location", max_source_len=L)
                        for L in (5, 9)])["attention_kwargs.max_source_len"] == 9  # fmt: skip
    kv = dict(base, attention="key_value")
    assert shape_key(dict(kv, attention_kwargs={"key_dim": 8})) != shape_key(kv)
    assert shape_key(dict(kv, attention_kwargs={"scaled": True})) == shape_key(kv)


def test_the_lists_name_real_options_of_every_registered_mechanism():
    assert set(axes.MAX_SOURCE_LEN_PER_MEMBER) == set(ATTENTION_REGISTRY), (
        "a new mechanism: decide whether its members may be built for different lengths, and "
        "list it in lightning_modules/fused/axes.py's MAX_SOURCE_LEN_PER_MEMBER if they may"
    )
    for name, options in axes.MEMBER_ATTENTION_OPTIONS.items():
        assert name in ATTENTION_REGISTRY and set(options) <= set(attention_options(name)), name
    for name, options in axes.PADDED_ATTENTION_OPTIONS.items():
        assert set(options) <= set(axes.MEMBER_ATTENTION_OPTIONS[name])


def test_every_module_argument_is_implemented_by_the_fused_and_graphed_steps():
    """The fused and the graphed steps compute the loss and the update themselves: an argument of
    Seq2SeqModule they do not know would be dropped without a word."""
    import inspect

    arguments = set(inspect.signature(Seq2SeqModule.__init__).parameters) - {"self"}
    assert arguments == set(axes.STEP_ARGUMENTS), (
        "a new Seq2SeqModule argument: implement it in lightning_modules/fused/ and "
        "cuda_graphs.py and list it in lightning_modules/fused/axes.py's STEP_ARGUMENTS (until "
        "then a trial that sets it trains unfused and eager); unknown there: "
        f"{sorted(arguments - set(axes.STEP_ARGUMENTS))}"
    )


def test_an_argument_the_own_steps_lack_trains_alone_and_eager(monkeypatch):
    """Set away from its default, an argument missing from STEP_ARGUMENTS keeps a module out of
    any group and out of CUDA graphs; at its default it changes nothing."""
    from lightning_modules import cuda_graphs

    lacking = tuple(a for a in axes.STEP_ARGUMENTS if a != "weight_decay")
    monkeypatch.setattr(key, "STEP_ARGUMENTS", lacking)
    base = {"src_vocab_size": 9, "tgt_vocab_size": 9, "attention": "bahdanau", "preset": "tiny"}
    assert key.unfusable_reason(base) is None
    assert key.unfusable_reason(dict(base, weight_decay=0.0)) is None  # the default
    reason = key.unfusable_reason(dict(base, weight_decay=0.01))
    assert reason == (
        "Seq2SeqModule's weight_decay set away from the default has no fused form "
        "(lightning_modules/fused/ does not implement it): it trains unfused"
    )
    module = Seq2SeqModule(**base, weight_decay=0.01)
    assert "weight_decay set away from the default has no graphed form" in cuda_graphs.graph_gap(
        module
    )
    with pytest.raises(ValueError, match="it takes eager steps"):
        cuda_graphs.CudaGraphSeq2SeqModule.adopt(module)
    assert cuda_graphs.graph_gap(Seq2SeqModule(**base)) is None
    assert key.MEMBER_SETTINGS is axes.MEMBER_SETTINGS
    assert key.EVALUATION_SETTINGS is axes.EVALUATION_SETTINGS
    assert {
        "K",
        "encoder_scoring",
        "position_encoding",
        "max_source_len",
        "lr",
    } <= axes.member_keys("memory")
    assert axes.member_keys("bahdanau") == frozenset(
        axes.MEMBER_SETTINGS
        + axes.TEACHER_SETTINGS
        + axes.EVALUATION_SETTINGS
        + ("max_source_len",)
    )


def test_the_lists_import_without_torch():
    code = (
        "import sys; from lightning_modules.fused.axes import member_keys; member_keys('memory'); "
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
