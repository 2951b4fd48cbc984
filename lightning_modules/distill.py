"""The §3.1 objective of Britz, Guan & Luong (2017): a memory-attention student whose memory
matrix C is pulled toward the contexts a trained attention model (the teacher) computes.

    module = Seq2SeqModule(..., attention="memory", attention_kwargs={"K": 21},
                           distill_weight=1.0, teacher_checkpoint="bahdanau.ckpt",
                           init_from_teacher="encoder")

The paper (§3.1, "Model Interpretations") reads C, when K is close to |T|, as a prediction of the
T x D contexts a standard attention model computes, and proposes to "first train a regular
attention model and add a regularization term to force the memory matrix C to be close to" them.
The student's training loss becomes

    loss = cross_entropy + distill_weight * mean_b [ mean_{k matched} || C_bk - ctx_b,t(k) ||^2 ]

- **The teacher's contexts**: the teacher decodes the student's training batch teacher-forced
  (the same gold decoder inputs), in eval mode (no dropout: the contexts the trained model
  computes; a monotonic teacher attends hard), under ``torch.no_grad``. ``ctx_b,t`` is its
  context at target step t (the vector it feeds its output layer), (B, T, D).
- **The mapping** (:func:`matched_steps`): a sentence's |T| counts its real target positions,
  EOS included. When K >= |T|, row k is matched with step k (the paper's K = |T| case: row k is
  the context of step k), and the rows past the sentence's end are left free. When K < |T|, row
  k (0-based) is matched with step floor((k + 1/2) |T| / K): the middle of the k-th of K equal
  stretches of the target, so the K rows cover the sentence evenly, from its start to its end,
  in order (as the position encodings of §3.2 order them). Both rules agree at K = |T|, and each
  sentence gets its own |T|: a batch's padding is never matched.
- **The norm**: the squared Euclidean distance of each matched row (summed over D), averaged over
  the sentence's matched rows, then over the batch's sentences; so ``distill_weight`` is on the
  scale of a per-sentence distance, beside the cross-entropy's per-token mean.
- **Spaces**: C lives in the student encoder's space, the contexts in the teacher's. The two must
  have the same size D (a student with another memory size fails with an error that says so: no
  learned projection, which would let the term be met by the projection instead of C).
  ``init_from_teacher="encoder"`` starts the student from the teacher's encoder (embeddings, LSTM
  stack and the bridge to the decoder) and its target embeddings, so C starts in the teacher's
  space.

The teacher is loaded only to train (:class:`Teacher`, on the first training step or at
``setup("fit")``), never stored in the student's state dict, and loaded without touching the
global RNG, so ``distill_weight=0`` with ``init_from_teacher="none"`` is exactly the ordinary
model: no teacher loaded, the same random draws, the same weights and losses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import torch
from torch import nn

#: ``init_from_teacher``: nothing, or the teacher's encoder and embeddings
InitFromTeacher = Literal["none", "encoder"]
INIT_CHOICES: tuple[str, ...] = get_args(InitFromTeacher)


def matched_steps(
    K: int | torch.Tensor, lengths: torch.Tensor, rows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target step each memory row is matched with, per sentence (see the module doc).

    Args:
        K: rows of the memory matrix C; or a tensor of each sentence's own K, broadcastable to
            ``lengths`` (a fused group's members of different K: the rows past a sentence's own
            K are padding, never matched), with ``rows`` the rows of C (at least every K).
        lengths: (...) real target positions per sentence (EOS included); a sentence of 0
            positions (a fused member's filler row) has no row matched.
        rows: the rows of C where ``K`` is a tensor (read from ``K`` where it is an int).
    Returns:
        steps (..., rows) long, in [0, max(length - 1, 0)], and matched (..., rows) bool (False:
        a free row past the end of a sentence shorter than K, or past the sentence's own K).
    """
    if isinstance(K, int):
        rows, own = K, K
    elif rows is None:
        raise ValueError("matched_steps: give rows (the rows of C) with a tensor of K")
    else:
        own = K.to(torch.long).unsqueeze(-1)  # (..., 1)
    k = torch.arange(rows, device=lengths.device)  # (R,)
    n = lengths.to(torch.long).unsqueeze(-1)  # (..., 1)
    spread = torch.div((2 * k + 1) * n, 2 * own, rounding_mode="floor")  # floor((k+1/2) n/K)
    steps = torch.where(n > own, spread, k.expand_as(spread))  # (..., R)
    matched = k < n  # (..., R)
    if not isinstance(own, int):
        matched = matched & (k < own)
    # a free row points at the last step (or the first, in a sentence of none): unread
    return torch.minimum(steps, (n - 1).clamp(min=0)), matched


def sentence_distances(
    C: torch.Tensor,
    contexts: torch.Tensor,
    lengths: torch.Tensor,
    K: torch.Tensor | None = None,
) -> torch.Tensor:
    """mean_{k matched} || C_bk - contexts_b,t(k) ||^2 per sentence (0 for one with no row
    matched).

    Args:
        C: (..., R, D) the student's memory matrices.
        contexts: (..., T, D) the teacher's context at each target step (no gradient needed).
        lengths: (...) real target positions per sentence.
        K: each sentence's own K, broadcastable to ``lengths`` (None: R, every row its own).
    Returns:
        (...) the distances.
    """
    if C.shape[-1] != contexts.shape[-1]:
        raise ValueError(
            f"distillation: the student's memory vectors have D={C.shape[-1]} but the teacher's "
            f"contexts have D={contexts.shape[-1]}; give the student the teacher's encoder size "
            "(the same preset, or hidden_size and bidirectional)"
        )
    rows = C.shape[-2]
    steps, matched = matched_steps(rows if K is None else K, lengths, rows)  # (..., R), (..., R)
    index = steps.unsqueeze(-1).expand(*steps.shape, contexts.shape[-1])  # (..., R, D)
    target = contexts.gather(-2, index).to(C.dtype)  # (..., R, D)
    squared = (C - target).pow(2).sum(-1)  # (..., R)
    weight = matched.to(C.dtype)  # (..., R)
    return (squared * weight).sum(-1) / weight.sum(-1).clamp(min=1)  # (...)


def distillation_term(
    C: torch.Tensor, contexts: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """mean_b mean_{k matched} || C_bk - contexts_b,t(k) ||^2 (a scalar).

    Args:
        C: (B, K, D) the student's memory matrix.
        contexts: (B, T, D) the teacher's context at each target step (no gradient needed).
        lengths: (B,) real target positions per sentence.
    """
    return sentence_distances(C, contexts, lengths).mean()


class Teacher:
    """A trained model's teacher-forced contexts, for a student's training batches.

    Held outside the student's modules (not a submodule: never in its state dict or its
    optimiser), in eval mode with no gradients, moved to the batch's device when first used.

    Args:
        model: the teacher's :class:`~lightning_modules.seq2seq.Seq2Seq`.
        source: where it was loaded from, for messages.
    """

    def __init__(self, model: nn.Module, source: str) -> None:
        self.model = model.eval().requires_grad_(False)
        self.source = source

    @classmethod
    def load(cls, checkpoint: str, loader: Callable[[str], nn.Module]) -> Teacher:
        """The teacher of a ``Seq2SeqModule`` checkpoint, built without drawing from the global
        RNG (its random initialisation is forked off, then replaced by the checkpoint's weights).

        Args:
            loader: reads the checkpoint into a ``Seq2Seq`` (the module passes its own
                ``load_from_checkpoint``, so this file does not import the module above it).
        """
        from pathlib import Path

        if not Path(checkpoint).is_file():
            raise FileNotFoundError(
                f"distillation: the teacher checkpoint {checkpoint} does not exist; the teacher is "
                "needed to train the student (not to load or decode a trained one)"
            )
        with torch.random.fork_rng(devices=[]):  # built on the CPU: only its RNG would move
            model = loader(checkpoint)
        return cls(model, checkpoint)

    @torch.no_grad()
    def contexts(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """The teacher's context at every target step of a teacher-forced pass: (B, T, D)."""
        device = src.device
        if next(self.model.parameters()).device != device:
            self.model.to(device)
        self.model.eval()
        _, _, contexts = self.model.forward_with_contexts(src, src_lengths, tgt_in)
        return contexts  # (B, T, D)


def init_from_teacher(student: nn.Module, teacher: nn.Module, parts: str) -> list[str]:
    """Copy the teacher's encoder (embeddings, LSTM stack, bridge) and target embeddings into the
    student (both :class:`~lightning_modules.seq2seq.Seq2Seq`), in place. Returns the names of
    the copied tensors; a tensor of another shape raises, naming it and both shapes.

    Args:
        parts: ``"encoder"`` (the only choice besides ``"none"``, which copies nothing).
    """
    if parts == "none":
        return []
    if parts not in INIT_CHOICES:
        raise ValueError(
            f"init_from_teacher={parts!r} is not one of {', '.join(map(repr, INIT_CHOICES))}"
        )
    theirs = teacher.state_dict()
    copied = []
    with torch.no_grad():
        for name, tensor in student.state_dict().items():
            if not (name.startswith("encoder.") or name.startswith("decoder.embedding.")):
                continue
            if name not in theirs or theirs[name].shape != tensor.shape:
                found = tuple(theirs[name].shape) if name in theirs else "nothing"
                raise ValueError(
                    f"init_from_teacher: the student's {name} is {tuple(tensor.shape)} but the "
                    f"teacher has {found}; give the student the teacher's sizes and vocabulary"
                )
            tensor.copy_(theirs[name])
            copied.append(name)
    return copied


def check_same_space(student: nn.Module, teacher: nn.Module) -> None:
    """The student's memory vectors and the teacher's contexts must have one size D."""
    mine, theirs = student.attention.memory_dim, teacher.decoder.context_dim
    if mine != theirs:
        raise ValueError(
            f"distillation: the student's memory vectors have D={mine} but the teacher's contexts "
            f"have D={theirs}; give the student the teacher's encoder size (the same preset, or "
            "hidden_size and bidirectional)"
        )


def check_distillation(
    attention: str, distill_weight: float, teacher_checkpoint: Any, init: str
) -> None:
    """The configuration errors of the objective, raised before anything is built."""
    if init not in INIT_CHOICES:
        raise ValueError(
            f"init_from_teacher={init!r} is not one of {', '.join(map(repr, INIT_CHOICES))}"
        )
    if distill_weight > 0 and attention != "memory":
        raise ValueError(
            f"distill_weight={distill_weight:g} pulls memory attention's matrix C toward a "
            f"teacher's contexts; attention {attention!r} has no C: use attention='memory' or "
            "distill_weight=0"
        )
    if (distill_weight > 0 or init != "none") and not teacher_checkpoint:
        raise ValueError(
            "distill_weight > 0 and init_from_teacher need a teacher: pass teacher_checkpoint "
            "(a trained Seq2SeqModule checkpoint)"
        )
