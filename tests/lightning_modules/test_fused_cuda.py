"""Fused trials on a CUDA GPU: every registered mechanism's fused steps there give what they give
on the CPU (same weights and batches: losses, weights, Adam state), and bf16-mixed trains.
Members that differ along the member axes (test_fused_axes.py) train on CUDA as each trains
alone there, their padding stays 0, and a mixed group keeps members and resumes exactly.

Marked ``gpu`` and skipped where torch sees no CUDA device: run on a GPU machine with
``python -m pytest -m gpu tests/lightning_modules/test_fused_cuda.py``."""

from __future__ import annotations

import pytest
import torch
from test_fused import (
    CASES,
    CLIP,
    IDS,
    TOL,
    Unfused,
    assert_member_equals,
    batches_for,
    make_module,
)
from test_fused_axes import (
    CLIPS,
    GROUPS,
    OTHER_GROUPS,
    ROWS,
    SMALL,
    assert_padding_is_zero,
    group,
    group_batches,
    make_batch,
    small_member,
)

from lightning_modules.fused import FusedSeq2Seq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def on(device: str, batches: list[dict]) -> list[dict]:
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("attention, options", CASES, ids=IDS)
def test_fused_steps_on_cuda_equal_those_on_cpu(attention, options):
    groups = {
        device: FusedSeq2Seq.from_modules(
            [make_module(attention, options, m) for m in range(3)], clip=list(CLIP)
        ).to(device)
        for device in ("cpu", "cuda")
    }
    for step in range(2):
        batches = batches_for(step, range(3))
        losses = {d: g.train_step(on(d, batches)).cpu() for d, g in groups.items()}
        torch.testing.assert_close(losses["cuda"], losses["cpu"], **TOL)
    for i in range(3):
        cpu, cuda = groups["cpu"].member_module(i), groups["cuda"].member_module(i)
        assert next(cuda.parameters()).is_cuda
        for name, value in cpu.state_dict().items():
            torch.testing.assert_close(cuda.state_dict()[name].cpu(), value, **TOL, msg=name)
        mine, theirs = groups["cuda"].optimizer_state(i), groups["cpu"].optimizer_state(i)
        for index, state in theirs["state"].items():
            for key in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(mine["state"][index][key].cpu(), state[key], **TOL)


def test_bf16_mixed_trains_on_cuda():
    fused = FusedSeq2Seq.from_modules(
        [make_module("memory", {"K": 4}, m) for m in range(2)], precision="bf16-mixed"
    ).to("cuda")
    before = fused.flat.data.clone()
    losses = fused.train_step(on("cuda", batches_for(0, range(2))))
    assert losses.is_cuda and torch.isfinite(losses).all()
    assert not torch.equal(fused.flat.data, before)


@pytest.fixture
def full_float32():
    """No TF32 in cuBLAS or cuDNN (the unfused LSTM is cuDNN's): float32 products on both sides."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def to_cuda(fused: FusedSeq2Seq, refs: list[Unfused]) -> None:
    fused.to("cuda")
    for ref in refs:
        ref.module.to("cuda")  # the same Parameter objects: the optimiser follows them


@pytest.mark.parametrize("name", list(GROUPS))
def test_mixed_members_on_cuda_train_as_they_train_alone(name, full_float32):
    """As test_fused_axes' 50-step test, on CUDA on both sides."""
    fused, refs = group(name, weight_decay=False)
    to_cuda(fused, refs)
    for step in range(50):
        batches = on("cuda", group_batches(name, step))
        losses = fused.train_step(batches)
        assert losses.is_cuda
        expected = torch.stack([ref.step(b) for ref, b in zip(refs, batches)])
        torch.testing.assert_close(losses, expected, **TOL, msg=f"losses at step {step}")
    for i, ref in enumerate(refs):
        assert_member_equals(fused, i, ref)
    if name in ("K", "mix"):
        assert_padding_is_zero(fused)


@pytest.mark.parametrize("attention", list(OTHER_GROUPS))
def test_other_mechanisms_members_on_cuda_train_as_alone(attention, full_float32):
    spec = OTHER_GROUPS[attention]
    fused = FusedSeq2Seq.from_modules(
        [small_member(m, attention, L, o) for m, (L, o) in enumerate(spec)], clip=list(CLIPS[:3])
    )
    refs = [Unfused(small_member(m, attention, L, o), CLIPS[m]) for m, (L, o) in enumerate(spec)]
    to_cuda(fused, refs)
    for step in range(2):
        batches = on(
            "cuda", [make_batch(100 * step + m, ROWS[m], L) for m, (L, _) in enumerate(spec)]
        )
        expected = torch.stack([r.step(b) for r, b in zip(refs, batches)])
        torch.testing.assert_close(fused.train_step(batches), expected, **TOL)
        for i, ref in enumerate(refs):
            assert_member_equals(fused, i, ref)


def test_a_mixed_group_keeps_members_and_resumes_exactly_on_cuda():
    fused, _ = group("mix", **SMALL)
    fused.to("cuda")
    fused.train_step(on("cuda", group_batches("mix", 0)))
    fused.keep([4, 0, 2])  # the K=7 member leaves: the padding shrinks to K=5, on the GPU
    attention = fused.decoder.attention
    assert attention.K == 5 and attention.slots.is_cuda and attention.pe.is_cuda
    assert fused.flat.data.is_cuda
    assert_padding_is_zero(fused)
    resumed = FusedSeq2Seq.from_state_dict(fused.state_dict(), device="cuda")
    batches = on("cuda", group_batches("mix", 1, [4, 0, 2]))
    assert torch.equal(resumed.train_step(batches), fused.train_step(batches))
    assert torch.equal(resumed.flat.data, fused.flat.data)
    for i, (length, options) in enumerate(GROUPS["mix"][j] for j in (4, 0, 2)):
        module = fused.member_module(i)
        assert next(module.parameters()).is_cuda
        assert module.model.decoder.attention.K == options["K"]
        assert module.hparams.max_source_len == length
