"""Fused trials on a CUDA GPU: every registered mechanism's fused steps there give what they give
on the CPU (same weights and batches: losses, weights, Adam state), and bf16-mixed trains.
Members that differ along the member axes (test_fused_axes.py) train on CUDA as each trains
alone there, their padding stays 0, and a mixed group keeps members and resumes exactly. Fused
steps captured as CUDA graphs (lightning_modules/fused/graphs.py) give the eager fused steps, for
members of different K and lengths and for students, past the graphs a group holds and across a
change of members; the fused loop trains graphed on a CUDA device.

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
from test_fused_loop import MEMBERS as LOOP_MEMBERS
from test_fused_loop import build as build_loop_member
from test_fused_loop import run as run_loop
from test_fused_students import member_batches, students, teachers  # noqa: F401

from lightning_modules.fused import FusedSeq2Seq
from lightning_modules.fused.graphs import GraphedFusedSteps
from lightning_modules.fused.loop import FusedLoop, LoopMember, LoopSettings

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


# ---------------------------------------------------------------- fused steps as CUDA graphs
def eager_and_graphed(name: str, **sizes) -> tuple[FusedSeq2Seq, FusedSeq2Seq]:
    """The group ``GROUPS[name]`` twice on CUDA, from the same weights (each member seeded)."""
    return group(name, **sizes)[0].to("cuda"), group(name, **sizes)[0].to("cuda")


def two_shapes(name: str, step: int, members: list[int] | None = None) -> list[dict]:
    """The group's batches of ``step`` on CUDA: every member's full length on even steps, at
    most 5 positions on odd ones, so that the steps fall into two buckets (two graphs)."""
    spec = GROUPS[name]
    members = range(len(spec)) if members is None else members
    return on(
        "cuda",
        [make_batch(100 * step + m, ROWS[m], spec[m][0] if step % 2 == 0 else min(spec[m][0], 5))
         for m in members],
    )  # fmt: skip


def assert_same_group(graphed: FusedSeq2Seq, eager: FusedSeq2Seq, msg: str = "") -> None:
    for name in ("data", "exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(
            getattr(graphed.flat, name), getattr(eager.flat, name), **TOL, msg=f"{name} {msg}"
        )
    assert graphed.steps == eager.steps


@pytest.mark.parametrize("name", ["K", "length", "mix"])
def test_graphed_fused_steps_equal_eager_fused_steps(name, full_float32):
    """Members of different K (padded slots masked), lengths (each member's own, a PE member's
    source capped at its length) and both, over 8 steps of two bucket shapes: each step is
    captured once per bucket, then replayed, and gives the eager fused step's losses, weights and
    Adam state; the padding stays exactly 0."""
    eager, graphed = eager_and_graphed(name)
    steps = GraphedFusedSteps(graphed)
    assert steps.capture
    for step in range(8):
        batches = two_shapes(name, step)
        losses = steps.step(batches)
        assert losses.is_cuda
        torch.testing.assert_close(losses, eager.train_step(batches), **TOL, msg=f"step {step}")
        assert_same_group(graphed, eager, f"after step {step}")
    assert steps.graphs == 2 and steps.captures == 2 and steps.eager_steps == 0
    if name in ("K", "mix"):
        assert_padding_is_zero(graphed)


def test_graphed_student_steps_equal_eager_ones(teachers, full_float32):  # noqa: F811
    """Students of two teachers (contexts computed eagerly, staged into the graph's inputs)
    beside members without a term: the graphed steps give the eager ones, the terms included."""
    members = list(range(5))
    eager, graphed = (students(teachers, members)[0].to("cuda") for _ in range(2))
    steps = GraphedFusedSteps(graphed)
    for step in range(4):
        batches = on("cuda", member_batches(step, members))
        torch.testing.assert_close(steps.step(batches), eager.train_step(batches), **TOL)
        torch.testing.assert_close(graphed.last_distill, eager.last_distill, **TOL)
        assert_same_group(graphed, eager, f"after step {step}")
    assert steps.graphs >= 1 and steps.eager_steps == 0


def test_steps_past_the_graphs_held_run_eagerly_and_equal(full_float32):
    """With one graph held, the second bucket's steps run the same work without a graph."""
    eager, graphed = eager_and_graphed("K")
    steps = GraphedFusedSteps(graphed, max_graphs=1)
    for step in range(4):
        batches = two_shapes("K", step)
        torch.testing.assert_close(steps.step(batches), eager.train_step(batches), **TOL)
    assert steps.graphs == 1 and steps.eager_steps == 2
    assert_same_group(graphed, eager)


def test_a_change_of_members_captures_again(full_float32):
    """Dropping the member of the largest K gives new, smaller buffers: the old graphs go, the
    next step is captured again, and the kept members go on as the eager group's."""
    eager, graphed = eager_and_graphed("mix", **SMALL)
    steps = GraphedFusedSteps(graphed)
    for step in range(2):
        batches = on("cuda", group_batches("mix", step))
        torch.testing.assert_close(steps.step(batches), eager.train_step(batches), **TOL)
    for fused in (eager, graphed):
        fused.keep([4, 0, 2])
    for step in range(2, 4):
        batches = on("cuda", group_batches("mix", step, [4, 0, 2]))
        torch.testing.assert_close(steps.step(batches), eager.train_step(batches), **TOL)
    assert steps.captures == 2 and steps.graphs == 1
    assert_same_group(graphed, eager)
    assert_padding_is_zero(graphed)


def test_the_fused_loop_trains_graphed_on_cuda(full_float32):
    """cuda_graphs on a CUDA device: the loop's steps are graphed (and say so), and its members'
    losses and validations are the eager loop's."""

    def loop(graphs: bool) -> FusedLoop:
        parts = {}
        for j in range(3):
            dm, module = build_loop_member(j)
            parts[j] = LoopMember(dm, module, LOOP_MEMBERS[j][3])
        settings = LoopSettings(max_steps=6, val_check_interval=3, cuda_graphs=graphs)
        return FusedLoop(parts, settings, "cuda")

    graphed, eager = loop(True), loop(False)
    assert graphed.graphed is not None and eager.graphed is None
    assert graphed.graphs_line.startswith("CUDA graphs: the fused group's training steps")
    mine, theirs = run_loop(graphed), run_loop(eager)
    assert graphed.graphed.graphs >= 1 and graphed.graphed.eager_steps == 0
    for j in range(3):
        torch.testing.assert_close(
            torch.tensor(mine["losses"][j]), torch.tensor(theirs["losses"][j]), **TOL
        )
        for step in (3, 6):
            a, b = mine["validations"][step][j], theirs["validations"][step][j]
            assert a.metrics["val/loss"] == pytest.approx(b.metrics["val/loss"], rel=1e-4)
