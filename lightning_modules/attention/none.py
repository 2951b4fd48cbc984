"""No attention: the decoder gets a zero context, the sequence-to-sequence baseline."""

from __future__ import annotations

import torch

from .base import Attention, beam_groups, register_attention


@register_attention("none")
class NoAttention(Attention):
    """Returns zeros; costs nothing per step. Weights, if asked for, are all zero."""

    shares_cache = True
    step_cost = 0.8  # the decoder and output layer alone

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {"mask": mask, "zeros": memory.new_zeros(memory.shape[0], memory.shape[2])}  # (B, D)

    def step(self, query, cache, state, need_weights=False):
        rows, S = query.shape[0], cache["mask"].shape[1]
        beam_groups(query, cache["mask"].shape[0])  # checks the rows (beams) per cache row
        weights = query.new_zeros(rows, S) if need_weights else None  # (N, S)
        zeros = (
            cache["zeros"]
            if cache["zeros"].shape[0] == rows
            else cache["zeros"][:1].expand(rows, -1)
        )  # (N, D)
        return zeros, state, weights
