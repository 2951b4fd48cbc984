"""A fused group's steps for CUDA graphs (lightning_modules/fused/graphs.py), everything that needs
no CUDA: the work a graph holds, run eagerly on the CPU, is the eager fused step (the masked
encoder gives the packed one, the bucket's padding changes nothing, clipping and Adam read their
settings from tensors), for members of different K and lengths and for students, and it reads
nothing on the host, for every mechanism (a read a capture cannot hold); the buckets and
their cap; when a step is captured, replayed or run eagerly (the fallback past the graphs a group
holds); a change of members restarting the graphs; what is refused. The captures themselves are
tested on a GPU (test_fused_cuda.py)."""

from __future__ import annotations

import pytest
import torch
from test_fused import CASES, IDS, TOL, Unfused, assert_member_equals, batches_for, make_module
from test_fused_axes import SMALL, group, group_batches
from test_fused_students import Student, member_batches, students, teachers  # noqa: F401
from torch.utils._python_dispatch import TorchDispatchMode

from lightning_modules.fused import FusedSeq2Seq
from lightning_modules.fused.graphs import (
    CAPTURE,
    EAGER,
    REPLAY,
    GraphedFusedSteps,
    decide,
    graphs_line,
    group_bucket,
)
from lightning_modules.fused.layers import member_embedding

pytestmark = pytest.mark.filterwarnings(r"ignore:You are trying to `self\.log\(\)`")


def assert_groups_equal(a: FusedSeq2Seq, b: FusedSeq2Seq) -> None:
    """Weights and Adam's moments (every member, padding included) and step counts."""
    for name in ("data", "exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(getattr(a.flat, name), getattr(b.flat, name), **TOL, msg=name)
    assert a.steps == b.steps


# ---------------------------------------------------------------- the work a graph holds
@pytest.mark.parametrize(
    "sizes", [{}, dict(encoder_layers=2), dict(encoder_layers=2, bidirectional=False)]
)
def test_the_masked_encoder_gives_what_the_packed_one_gives(sizes):
    """Members of different sentence counts and lengths: the same memory (zero at padding),
    mask and decoder start state, and the same gradients through them."""
    members = [make_module("memory", {"K": 4}, m, **sizes) for m in range(3)]
    packed, masked = (FusedSeq2Seq.from_modules(members) for _ in range(2))
    src, lengths, tgt = packed._stack(batches_for(0, range(3)))
    outputs = []
    for fused, encode in ((packed, packed.encoder), (masked, masked.encoder.masked)):
        memory, mask, (hs, cs) = encode(src, lengths)
        fused._backward(memory.square().sum() + sum(h.sum() for h in hs + cs))
        outputs.append((memory, mask, hs + cs, fused.flat.grad.clone()))
    (memory, mask, states, grad), (memory2, mask2, states2, grad2) = outputs
    torch.testing.assert_close(memory2, memory, **TOL)
    assert torch.equal(mask2, mask) and torch.all(memory2[~mask2] == 0)
    for a, b in zip(states2, states):
        torch.testing.assert_close(a, b, **TOL)
    torch.testing.assert_close(grad2, grad, **TOL)


@pytest.mark.parametrize("name", ["K", "length", "mix"])
def test_the_graphs_work_run_eagerly_is_the_eager_fused_step(name):
    """Members of different K and lengths (each its own sentence count): five steps of the
    bucketed work (what a graph captures: padded to multiples of 8, the masked encoder, clipping
    and Adam on the device's tensors) give the eager steps' losses, weights and Adam state."""
    eager, _ = group(name, **SMALL)
    graphed, _ = group(name, **SMALL)
    steps = GraphedFusedSteps(graphed, capture=False)
    for step in range(5):
        batches = group_batches(name, step)
        torch.testing.assert_close(steps.step(batches), eager.train_step(batches), **TOL)
        assert_groups_equal(graphed, eager)
    assert steps.eager_steps == 5 and steps.graphs == 0
    for B, S, T in steps.buckets:  # the source capped at the members' longest (with PE: 12)
        assert B % 8 == 0 and T % 8 == 0 and (S % 8 == 0 or S == steps._cap() == 12)


class HostReads(TorchDispatchMode):
    """Records the operators that read a tensor's values on the host, or whose output's shape
    depends on them, and tensors made from the host's data (``torch.tensor(list)``: on a GPU a copy
    from pageable memory): on a GPU each waits for the device or the host, and a CUDA graph cannot
    capture it. ``Tensor.tolist`` is not an operator: :func:`host_reads` watches it beside."""

    READS = frozenset(
        {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default"}
        | {"aten.lift_fresh.default"}
        | {"aten.unique_consecutive.default", "aten._unique2.default", "aten.unique_dim.default"}
    )

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        bool_index = name == "aten.index.Tensor" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] or ()
        )
        sized = name == "aten.repeat_interleave.Tensor" and kwargs.get("output_size") is not None
        if (
            name in self.READS
            or bool_index
            or (name.startswith("aten.repeat_interleave") and not sized)
        ):
            self.found.append(name)
        return func(*args, **kwargs)


def host_reads(run) -> list[str]:
    """What ``run()`` read on the host (:class:`HostReads`, and ``Tensor.tolist`` calls)."""
    tolist, calls = torch.Tensor.tolist, []

    def watched(self):
        calls.append("Tensor.tolist")
        return tolist(self)

    torch.Tensor.tolist = watched
    try:
        with HostReads() as mode:
            run()
    finally:
        torch.Tensor.tolist = tolist
    return sorted(set(mode.found + calls))


def graphed_work(fused: FusedSeq2Seq, batches: list[dict]):
    """The work :class:`GraphedFusedSteps` captures for ``batches``' bucket, to run again."""
    steps = GraphedFusedSteps(fused, capture=False)
    steps.step(batches)  # stages the bucket
    (bucket,) = steps.buckets.values()
    return lambda: steps._work(bucket)


@pytest.mark.parametrize("attention, options", CASES, ids=IDS)
def test_the_work_a_graph_captures_reads_nothing_on_the_host(attention, options):
    """No value read back to the host and no shape taken from values in the captured step of any
    mechanism (on a GPU such a read breaks the capture; the eager packed step makes them)."""
    fused = FusedSeq2Seq.from_modules([make_module(attention, options, m) for m in range(2)])
    assert host_reads(graphed_work(fused, batches_for(0, range(2)))) == []
    packed = FusedSeq2Seq.from_modules([make_module(attention, options, m) for m in range(2)])
    assert "Tensor.tolist" in host_reads(lambda: packed.train_step(batches_for(0, range(2))))


@pytest.mark.parametrize("name", ["K", "length", "mix"])
def test_the_captured_work_of_members_of_other_shapes_reads_nothing_on_the_host(name):
    fused, _ = group(name, **SMALL)
    assert host_reads(graphed_work(fused, group_batches(name, 0))) == []


def test_a_student_groups_captured_work_reads_nothing_on_the_host(teachers):  # noqa: F811
    """The teachers' contexts are computed before the replay and staged in the bucket: the
    captured step of students beside a member without a teacher reads nothing either."""
    fused, _ = students(teachers, [0, 1, 2])
    assert host_reads(graphed_work(fused, member_batches(0, [0, 1, 2]))) == []


def test_a_student_groups_graphed_work_is_its_eager_step(teachers):  # noqa: F811
    """Students of two teachers beside a member without one: the teachers' contexts, computed
    before the step and staged in the bucket, give each member its unfused student's step."""
    members = [0, 1, 2]
    fused, refs = students(teachers, members)
    steps = GraphedFusedSteps(fused, capture=False)
    for step in range(3):
        batches = member_batches(step, members)
        losses = steps.step(batches)
        expected = torch.stack([ref.step(b) for ref, b in zip(refs, batches)])
        torch.testing.assert_close(losses, expected, **TOL)
        assert fused.last_distill[0] > 0 and fused.last_distill[2] == 0
    for i, ref in enumerate(refs):
        assert_member_equals(fused, i, ref)


def test_keep_restarts_the_graphs_and_the_step_counts_follow():
    """Dropping members gives new buffers: the buckets (and their graphs) go, the device's step
    counts restart from the kept members', and the kept members step as the eager group does."""
    eager, _ = group("mix", **SMALL)
    graphed, _ = group("mix", **SMALL)
    steps = GraphedFusedSteps(graphed, capture=False)
    for step in range(2):
        batches = group_batches("mix", step)
        steps.step(batches)
        eager.train_step(batches)
    assert steps.buckets
    for fused in (eager, graphed):
        fused.keep([4, 0, 2])
    batches = group_batches("mix", 2, [4, 0, 2])
    torch.testing.assert_close(steps.step(batches), eager.train_step(batches), **TOL)
    assert steps._steps.view(-1).tolist() == [3.0, 3.0, 3.0]
    assert list(steps.buckets) == [(8, 16, 16)]
    assert_groups_equal(graphed, eager)


def test_clipping_and_adam_on_the_device_are_the_hosts():
    """Members that clip (tightly and not at all) with weight decay: each step's gradients,
    weights and moments after the device's clipping and Adam are the host's."""
    members = [make_module("bahdanau", {}, m) for m in range(3)]
    clip = [None, 1.0, 0.05]
    eager = FusedSeq2Seq.from_modules(members, clip=clip)
    graphed = FusedSeq2Seq.from_modules(members, clip=clip)
    steps = GraphedFusedSteps(graphed, capture=False)
    refs = [Unfused(make_module("bahdanau", {}, m), clip[m]) for m in range(3)]
    for step in range(3):
        batches = batches_for(step, range(3))
        steps.step(batches)
        eager.train_step(batches)
        for ref, batch in zip(refs, batches):
            ref.step(batch)
        torch.testing.assert_close(graphed.flat.grad, eager.flat.grad, **TOL)
        assert_groups_equal(graphed, eager)
    for i, ref in enumerate(refs):
        assert_member_equals(graphed, i, ref)


def test_member_embedding_is_each_members_own_table():
    """The gather (whose backward a graph captures) reads member m's row of its own table and
    sends each gradient there, as advanced indexing does."""
    weight = torch.randn(3, 7, 5, requires_grad=True)
    ids = torch.randint(0, 7, (3, 4, 6))
    out = member_embedding(weight, ids)
    expected = weight[torch.arange(3).view(3, 1, 1), ids]
    assert torch.equal(out, expected)
    grad_out = torch.randn_like(out)
    (mine,) = torch.autograd.grad(out, weight, grad_out)
    (theirs,) = torch.autograd.grad(expected, weight, grad_out)
    torch.testing.assert_close(mine, theirs)


# ---------------------------------------------------------------- buckets and decisions
def test_buckets_round_the_groups_largest_shapes_up():
    assert group_bucket((5, 11, 9)) == (8, 16, 16)
    assert group_bucket((16, 16, 17)) == (16, 16, 24)
    assert group_bucket((5, 11, 9), src_cap=12) == (8, 12, 16)  # not past the mechanism's length
    assert group_bucket((5, 13, 9), src_cap=12) == (8, 13, 16)  # never below the batch's own
    # a group's cap: the longest length its members' mechanisms cover, where all are capped
    pe = [make_module("memory", {"K": 2, "position_encoding": True}, m) for m in range(2)]
    assert GraphedFusedSteps(FusedSeq2Seq.from_modules(pe), capture=False)._cap() == 12
    mixed = [pe[0], make_module("memory", {"K": 2}, 1)]
    assert GraphedFusedSteps(FusedSeq2Seq.from_modules(mixed), capture=False)._cap() is None


def test_when_a_step_is_captured_replayed_or_run_eagerly():
    assert decide(captured=True, graphs=3, capture=True) == REPLAY
    assert decide(captured=False, graphs=3, capture=True) == CAPTURE
    assert decide(captured=False, graphs=16, capture=True) == EAGER  # past the graphs held
    assert decide(captured=False, graphs=1, capture=True, max_graphs=1) == EAGER
    assert decide(captured=False, graphs=0, capture=False) == EAGER  # no CUDA: every step


def test_what_graphs_refuse_and_say():
    members = [make_module("memory", {"K": 4}, m) for m in range(2)]
    with pytest.raises(ValueError, match="capture float32 steps; the group trains bf16-mixed"):
        GraphedFusedSteps(FusedSeq2Seq.from_modules(members, precision="bf16-mixed"))
    with pytest.raises(ValueError, match="need a CUDA device; the group is on cpu"):
        GraphedFusedSteps(FusedSeq2Seq.from_modules(members), capture=True)
    assert not GraphedFusedSteps(FusedSeq2Seq.from_modules(members)).capture  # on the CPU
    assert graphs_line(False, torch.device("cuda")) is None
    assert "ignored: this group trains on the CPU" in graphs_line(True, torch.device("cpu"))
    assert graphs_line(True, torch.device("cuda", 0)).startswith("CUDA graphs: the fused group")
