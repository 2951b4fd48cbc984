"""Fused trials: M models of one group key trained as one model, each still a model of its own.

A sweep's trials often differ only in what changes no shared tensor shape: the seed, the learning
rate, weight decay, dropout, gradient clipping, and memory attention's K, scoring functions,
position encodings and the length each was built for. Such models can train as one: every weight
gets a leading member dimension M, every matrix product becomes one batched product over the
members, and a training step costs about as many operations as one model's. On a CPU, where a small
model's step is mostly per-operation overhead, and on a GPU, where it is mostly kernel launches,
M members then train for little more than the price of one::

    import torch

    from datamodules import CopyTaskDataModule
    from lightning_modules import Seq2SeqModule
    from lightning_modules.fused import FusedSeq2Seq, shape_key

    modules, batches = [], []
    for seed, lr, K, length in [(0, 1e-3, 16, 10), (1, 1e-3, 4, 10), (2, 3e-3, 64, 40)]:
        dm = CopyTaskDataModule(max_length=length, train_size=256, seed=seed)  # vocabularies of 24
        dm.setup("fit")
        batches.append(next(iter(dm.train_dataloader())))   # each member's batch, its own lengths
        torch.manual_seed(seed)                       # each member starts where its own run would
        modules.append(Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="memory",
                                     attention_kwargs={"K": K}, max_source_len=dm.max_source_len,
                                     lr=lr))
    assert len({shape_key(m.hparams) for m in modules}) == 1     # they fuse
    fused = FusedSeq2Seq.from_modules(modules, clip=[1.0, 1.0, None])
    losses = fused.train_step(batches)                           # (3,) one step of each member
    model = fused.member_module(1)                               # a plain Seq2SeqModule, K=4

What fuses: two modules fuse iff their :func:`shape_key` (the group key) is equal: the mechanism
and the options it does not take per member, the sizes, the vocabularies and the special ids.
``lr``, ``weight_decay`` and ``dropout`` may differ per member, so may each member's gradient
clipping value and its batches (their lengths and sizes: they are padded to the longest inside),
and the *member axes* (:func:`member_axes`; the lists, torch-free, are
:mod:`lightning_modules.fused.axes`'): ``max_source_len``, memory attention's ``K``,
``encoder_scoring``, ``decoder_scoring``, ``encoder_normalization``, ``position_encoding``,
``position_encoding_normalization``, luong_location's length, key_value's ``scaled``, local
attention's ``window``, monotonic attention's ``sigmoid_noise``, ``score_bias_init`` and
``scan_chunk``. Members of different K share weights of the largest K; a member's padded slots
are masked out before the scoring functions, so they get weight 0 and gradient 0 and their
weights, gradients and Adam moments stay exactly 0 (:mod:`lightning_modules.fused.memory`,
:meth:`lightning_modules.fused.layout.FlatParameters.padding`); a
per-member choice of function (scoring, position encoding on or off) computes every branch the
group uses and picks each member's with a mask. :func:`padded_axes` says what a group computes
(its largest K, the branches), for costing it. A group whose members agree along the axes runs
the plain mechanism, at the cost of one shape. Every registered attention mechanism fuses;
monotonic attention in its soft training modes (forcing ``mode="hard"`` in training has no fused
form: :func:`unfusable_reason` says so).

The same maths: with dropout off, a fused step of M members gives what M unfused steps
(``Seq2SeqModule``'s loss, Lightning's norm clipping, ``torch.optim.Adam``) give on the same
batches, to float32 rounding: losses, gradients, weights and Adam's state
(tests/lightning_modules/test_fused.py; members of different K, scoring, position encoding and
length: tests/lightning_modules/test_fused_axes.py). Each member's sentences keep their own
lengths exactly as the unfused model's packed sequences do. With dropout (and with monotonic
attention's pre-sigmoid noise), each member draws its own masks from one random stream over the
stacked tensors: a member is then a draw from the same distribution as its unfused run, not the
same numbers.

Each member stays a model of its own: :meth:`FusedSeq2Seq.member_module` gives member i as a
plain ``Seq2SeqModule`` (its hparams, copies of its current weights, eval mode) to validate,
decode and checkpoint, and :meth:`FusedSeq2Seq.optimizer_state` its Adam state in
``torch.optim.Adam``'s format, so its checkpoint loads as an unfused trial's (weights, step,
epoch and Adam state; ``Trainer.fit(ckpt_path=...)`` refuses it, as it holds no fit loop's
position: a group resumes from its own state).
:meth:`FusedSeq2Seq.keep` drops members (a trial stopped early stops costing compute, and the
padding shrinks to the largest K left; :attr:`FusedSeq2Seq.member_ids` maps the remaining ones
to the original numbering), and
:meth:`FusedSeq2Seq.state_dict` / :meth:`FusedSeq2Seq.from_state_dict` save and restore the
whole group exactly. ``precision="bf16-mixed"`` (or the caller's ``torch.autocast``) trains
under bf16 autocast.

A member may be a §3.1 student (:mod:`lightning_modules.distill`) with a teacher of its own, or
none, beside the others: :meth:`FusedSeq2Seq.from_modules` starts it as ``setup("fit")`` starts it
alone (its teacher loaded without drawing from the random stream, ``init_from_teacher`` applied
before its weights are copied in), and each step adds its ``distill_weight`` times its term
against its teacher's contexts on its own batch, with its own K, to its loss; the teachers are
never part of the group's state (tests/lightning_modules/test_fused_students.py).

Training a group as Lightning's Trainer trains a trial (each member's batches in Lightning's
order, Lightning's validation, checkpoints in Lightning's format, an exact resume) is
:class:`~lightning_modules.fused.loop.FusedLoop`'s job; on a CUDA device its step may be captured
as CUDA graphs per length bucket (:class:`~lightning_modules.fused.graphs.GraphedFusedSteps`).

How it is built: the encoder and decoder are written with the member dimension
(:mod:`lightning_modules.fused.encoder`, :mod:`lightning_modules.fused.decoder`; the LSTM cell's
pointwise part is the unfused encoder's, and the encoder packs its steps as ``nn.LSTM`` does);
each attention mechanism is its own class run on the members' batches folded into
one batch of M * B rows, with its linear maps applied per member
(:mod:`lightning_modules.fused.attention`); all weights live in one (M, P) buffer so that
clipping and Adam are a few whole-buffer operations (:mod:`lightning_modules.fused.layout`,
:mod:`lightning_modules.fused.adam`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "FusedLoop",
    "FusedSeq2Seq",
    "GraphedFusedSteps",
    "member_axes",
    "padded_axes",
    "shape_difference",
    "shape_key",
    "unfusable_reason",
]
# imported on first use, so that the torch-free lists of .axes load without torch
_HOMES = {
    "FusedLoop": ".loop",
    "FusedSeq2Seq": ".model",
    "GraphedFusedSteps": ".graphs",
    "member_axes": ".key",
    "padded_axes": ".key",
    "shape_difference": ".key",
    "shape_key": ".key",
    "unfusable_reason": ".key",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
