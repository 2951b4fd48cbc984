"""CUDA graphs for a fused group's training step: the forward pass of every member, the backward
of their summed losses, each member's gradient clipping and Adam, captured once per length bucket
and replayed, as :mod:`lightning_modules.cuda_graphs` does for one model::

    from lightning_modules.fused.graphs import GraphedFusedSteps
    fused = FusedSeq2Seq.from_modules(modules).to("cuda")
    steps = GraphedFusedSteps(fused)
    losses = steps.step(batches)          # as fused.train_step(batches), replayed from a graph

(:class:`~lightning_modules.fused.loop.FusedLoop` uses it for ``cuda_graphs`` on a CUDA device;
a sweep turns it on with ``trainer.cuda_graphs: true``.)

What a capture needs, and how it is met:

- **Static shapes.** The members' batches are stacked (:meth:`FusedSeq2Seq._stack`) and padded
  up to the group's *bucket*: the largest batch size, source and target length among the
  members, each rounded up to a multiple of :data:`~lightning_modules.cuda_graphs.PAD_MULTIPLE`
  (the source never past the longest ``max_source_len`` a member's mechanism covers,
  :func:`group_bucket`), copied into that bucket's input tensors. One graph per bucket, at most
  :data:`~lightning_modules.cuda_graphs.MAX_GRAPHS`; a step of a further bucket runs the same
  work eagerly (:func:`decide`). Padding changes nothing: padded rows are one pad token with no
  target, padded positions are masked, padded target steps are ignored by the loss.
- **No host reads.** The encoder runs its masked recurrence (:meth:`FusedEncoder.masked`), not
  the packed one, whose step sizes are read on the host; clipping and Adam read each member's
  settings and step count from tensors on the device
  (:func:`~lightning_modules.fused.adam.adam_step_on_device_`: bias corrections in float32, as
  ``torch.optim.Adam(capturable=True)`` computes them); the §3.1 teachers' contexts are computed
  eagerly before the replay and copied into the bucket like the batch.
- **Memory that stays put.** The flat buffers of weights, gradients and Adam's moments are the
  same tensors in every graph; a change of members (:meth:`FusedSeq2Seq.keep`) or a restored
  state gives new buffers, and the graphs are captured again.
- **Warm-up before a capture** on a side stream, with the weights, Adam's state, the step counts
  and the CUDA random state saved before and put back after: the first replayed step is the
  first step.

The same maths as :meth:`FusedSeq2Seq.train_step` to float32 rounding
(``tests/lightning_modules/test_fused_cuda.py`` on a GPU; on the CPU the same work runs eagerly,
``tests/lightning_modules/test_fused_graphs.py``); dropout draws other masks (from the same
distribution). 32-true only. The encoder runs its own recurrence in the graph, not cuDNN's LSTM
(which reads each sentence's length on the host when it packs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..cuda_graphs import MAX_GRAPHS, PAD_MULTIPLE, WARMUP_STEPS, bucket_shape, capture_failed
from .adam import adam_step_on_device_, clip_grad_norms_on_device_
from .layout import FlatParameters
from .model import FusedSeq2Seq

#: what :func:`decide` answers: replay the bucket's graph, capture it first, or step eagerly
REPLAY, CAPTURE, EAGER = "replay", "capture", "eager"


def graphs_line(requested: bool, device: torch.device) -> str | None:
    """What ``cuda_graphs`` does for a group training on ``device``, as one line (None: not
    asked for)."""
    if not requested:
        return None
    if device.type != "cuda":
        return "trainer.cuda_graphs ignored: this group trains on the CPU (eager steps)"
    return (
        "CUDA graphs: the fused group's training steps captured per length bucket (multiples of "
        f"{PAD_MULTIPLE}, up to {MAX_GRAPHS} graphs) and replayed"
    )


def group_bucket(
    shape: tuple[int, int, int], multiple: int = PAD_MULTIPLE, src_cap: int | None = None
) -> tuple[int, int, int]:
    """The padded (batch, source length, target length) of a group's stacked batches of
    ``shape`` (the largest of each among the members), as
    :func:`~lightning_modules.cuda_graphs.bucket_shape` rounds one model's."""
    return bucket_shape(*shape, multiple=multiple, src_cap=src_cap)


def decide(captured: bool, graphs: int, capture: bool, max_graphs: int = MAX_GRAPHS) -> str:
    """How a step of a bucket runs: :data:`REPLAY` its graph, :data:`CAPTURE` one first (graphs
    wanted and fewer than ``max_graphs`` held), else :data:`EAGER` (the same work, no graph).

    Args:
        captured: the bucket has its graph.
        graphs: graphs held so far.
        capture: graphs are wanted (a CUDA device).
    """
    if captured:
        return REPLAY
    if capture and graphs < max_graphs:
        return CAPTURE
    return EAGER


@dataclass
class _Bucket:
    """One bucket's input tensors and, once captured, its graph and outputs."""

    src: torch.Tensor  # (M, B', S') long
    lengths: torch.Tensor  # (M, B') long
    tgt: torch.Tensor  # (M, B', T') long
    contexts: torch.Tensor | None  # (students, B', T', D) the teachers' contexts
    graph: Any = None  # torch.cuda.CUDAGraph
    losses: torch.Tensor | None = None  # (M,)
    distill: torch.Tensor | None = None  # (M,)

    def stage(
        self,
        src: torch.Tensor,
        lengths: torch.Tensor,
        tgt: torch.Tensor,
        contexts: torch.Tensor | None,
        pad_id: int,
    ) -> None:
        """Copy the stacked batches (and contexts) in; the rest is padding (rows of one pad
        token, no target; contexts 0, never read)."""
        _, b, s = src.shape
        self.src.fill_(pad_id)
        self.src[:, :b, :s].copy_(src)
        self.lengths.fill_(1)
        self.lengths[:, :b].copy_(lengths)
        self.tgt.fill_(pad_id)
        self.tgt[:, :b, : tgt.shape[2]].copy_(tgt)
        if contexts is not None:
            self.contexts.zero_()
            self.contexts[:, :b, : contexts.shape[2]].copy_(contexts)


class GraphedFusedSteps:
    """Training steps of a :class:`FusedSeq2Seq` over static, bucketed batches: replayed CUDA
    graphs where ``capture`` (a CUDA model), else the same work eagerly (module docstring).

    Args:
        fused: the group (32-true).
        capture: capture graphs (default: where the model is on a CUDA device).
        multiple, max_graphs, warmup: the bucket rounding, graphs held, warm-up steps before a
            capture (:mod:`lightning_modules.cuda_graphs`' defaults).
    Raises:
        ValueError: a precision other than 32-true; ``capture`` off a CUDA device.
    """

    def __init__(
        self,
        fused: FusedSeq2Seq,
        capture: bool | None = None,
        multiple: int = PAD_MULTIPLE,
        max_graphs: int = MAX_GRAPHS,
        warmup: int = WARMUP_STEPS,
    ) -> None:
        if fused.precision != "32-true":
            raise ValueError(
                f"CUDA graphs capture float32 steps; the group trains {fused.precision}: train "
                "it without graphs (trainer.cuda_graphs: false) or in 32-true"
            )
        capture = fused.device.type == "cuda" if capture is None else capture
        if capture and fused.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; the group is on {fused.device}")
        self.fused, self.capture = fused, capture
        self.multiple, self.max_graphs, self.warmup = multiple, max_graphs, warmup
        self.buckets: dict[tuple[int, int, int], _Bucket] = {}
        self.eager_steps = 0  # steps of buckets beyond max_graphs (all of them, without capture)
        self.captures = 0  # graphs captured, counting those of earlier member sets
        self._flat: FlatParameters | None = None
        self._data: torch.Tensor | None = None

    @property
    def graphs(self) -> int:
        return sum(b.graph is not None for b in self.buckets.values())

    def step(self, batches: Sequence[Mapping[str, torch.Tensor]]) -> torch.Tensor:
        """One training step of every member (as :meth:`FusedSeq2Seq.train_step`): returns the
        (M,) losses, read nothing back; a student's term is in ``fused.last_distill``."""
        fused = self.fused
        if len(batches) != fused.members:
            raise ValueError(f"step got {len(batches)} batches for {fused.members} members")
        self._follow_members()
        src, lengths, tgt = fused._stack(batches)  # (M, B, S), (M, B), (M, B, T)
        contexts = fused.teacher_contexts(src, lengths, tgt) if fused.students else None
        key = group_bucket((src.shape[1], src.shape[2], tgt.shape[2]), self.multiple, self._cap())
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = self._bucket(key, contexts)
        bucket.stage(src, lengths, tgt, contexts, fused.pad_id)
        fused.net.train()
        how = decide(bucket.graph is not None, self.graphs, self.capture, self.max_graphs)
        if how == CAPTURE:
            self._capture(bucket)
        if bucket.graph is not None:
            bucket.graph.replay()
            losses, distill = bucket.losses.clone(), bucket.distill  # overwritten next replay
        else:
            self.eager_steps += 1
            losses, distill = self._work(bucket)
            losses = losses.detach()
        fused.steps = [n + 1 for n in fused.steps]  # the device's counts went up in the step
        if distill is not None:
            fused.last_distill = distill.detach().clone()
        return losses

    # ---------------------------------------------------------------- the step
    def _work(self, bucket: _Bucket) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What a step does, and what a graph holds: the losses, backward, clipping, Adam."""
        fused = self.fused
        fused.flat.grad.zero_()
        losses = fused._losses(bucket.src, bucket.lengths, bucket.tgt, bucket.contexts, True)
        fused._backward(losses)
        clip_grad_norms_on_device_(fused.flat.grad, fused.member_tensor("clip"))
        decay = fused.member_tensor("weight_decay") if any(fused.weight_decay) else None
        adam_step_on_device_(fused.flat, self._steps, fused.member_tensor("lr"), decay)
        return losses.detach(), fused.last_distill if fused.students else None

    def _bucket(self, key: tuple[int, int, int], contexts: torch.Tensor | None) -> _Bucket:
        B, S, T = key
        M, device = self.fused.members, self.fused.device
        long = dict(dtype=torch.long, device=device)
        return _Bucket(
            torch.empty(M, B, S, **long),
            torch.empty(M, B, **long),
            torch.empty(M, B, T, **long),
            None
            if contexts is None
            else contexts.new_empty(contexts.shape[0], B, T, *contexts.shape[3:]),
        )

    def _cap(self) -> int | None:
        """The longest source any member's mechanism covers (a bucket never pads past it)."""
        limits = self.fused._source_limits
        return max(limits) if limits and all(limit is not None for limit in limits) else None

    def _follow_members(self) -> None:
        """After the members changed (or the state was restored): the old graphs read buffers
        that are gone, so they go; the device's step counts start from the model's."""
        flat = self.fused.flat
        if flat is self._flat and flat.data is self._data:
            return
        self.buckets.clear()
        self._flat, self._data = flat, flat.data
        steps = [[float(n)] for n in self.fused.steps]
        self._steps = torch.tensor(steps, dtype=torch.float32, device=self.fused.device)

    # ---------------------------------------------------------------- capture
    def _capture(self, bucket: _Bucket) -> None:
        saved = self._snapshot()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self._work(bucket)
        torch.cuda.current_stream().wait_stream(side)
        self._restore(saved)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                bucket.losses, bucket.distill = self._work(bucket)
        except RuntimeError as exc:
            raise capture_failed("the fused training step", exc) from exc
        bucket.graph = graph
        self.captures += 1

    def _snapshot(self) -> dict[str, Any]:
        """The weights, Adam's moments, the step counts and the CUDA random state."""
        flat = self.fused.flat
        return {
            "buffers": [t.clone() for t in (flat.data, flat.exp_avg, flat.exp_avg_sq)],
            "steps": self._steps.clone(),
            "rng": torch.cuda.get_rng_state(self.fused.device),
        }

    def _restore(self, saved: dict[str, Any]) -> None:
        """:meth:`_snapshot` put back into the same tensors (their memory stays where it is)."""
        flat = self.fused.flat
        with torch.no_grad():
            for tensor, value in zip((flat.data, flat.exp_avg, flat.exp_avg_sq), saved["buffers"]):
                tensor.copy_(value)
            self._steps.copy_(saved["steps"])
        torch.cuda.set_rng_state(saved["rng"], self.fused.device)
